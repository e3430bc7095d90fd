"""A running test control plane (:class:`ControlPlane`): kubectl and helm against it, its fake
Nodes, its components' lifecycle; and where the built binaries are.

``scripts/k8s/cluster.py`` starts one (``start``) or attaches to one (``attach``).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scripts.k8s.component_processes import (
    ComponentProcess,
    is_alive,
    log_tail,
    read_pids,
    terminate,
    wait_until,
)
from scripts.k8s.fake_nodes import KWOK_LABEL, KWOK_PAUSED, FakeNode

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "scripts" / "k8s" / "build"
VERSIONS_FILE = REPO / "scripts" / "k8s" / "versions.env"


class ControlPlaneError(RuntimeError):
    """The control plane could not be started, or a component died."""


class BuildMissingError(ControlPlaneError):
    """``scripts/k8s/build`` has not completed for the pinned versions."""


class KubectlError(subprocess.CalledProcessError):
    """A kubectl/helm command failed; the message includes its output."""

    def __str__(self) -> str:
        return (
            f"{' '.join(map(str, self.cmd))} exited {self.returncode}\n"
            f"stdout: {self.stdout}\nstderr: {self.stderr}"
        )


def versions() -> dict[str, str]:
    """The pinned versions from ``scripts/k8s/versions.env``."""
    out: dict[str, str] = {}
    for raw in VERSIONS_FILE.read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    return out


def bin_dir() -> Path:
    """The directory holding the built binaries; raises ``BuildMissingError`` if incomplete."""
    proc = subprocess.run(
        [str(BUILD_SCRIPT), "--print"], capture_output=True, text=True, check=False
    )
    path = Path(proc.stdout.strip())
    if proc.returncode != 0:
        raise BuildMissingError(
            f"The Kubernetes test binaries are not built (expected in {path}). "
            "Run scripts/k8s/build (20-40 minutes cold on 2 cores, then cached by version); "
            "scripts/test runs it."
        )
    return path


@dataclass
class ControlPlane:
    """A running control plane; use ``start()`` to make one and ``stop()`` to end it."""

    workdir: Path
    bin_dir: Path
    api_url: str
    token: str
    kubeconfig: Path
    ca_file: Path
    nodes: list[FakeNode] = field(default_factory=list)
    processes: list[ComponentProcess] = field(default_factory=list, repr=False)
    """The components, in the order they started (``start`` appends, ``attach`` reads the
    pids file); ``stop`` ends them newest first."""

    # ---- using it

    def env(self) -> dict[str, str]:
        """Environment for kubectl/helm/kopf: KUBECONFIG, the built binaries first on PATH."""
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        env["KUBECACHEDIR"] = str(self.workdir / "kube-cache")
        for kind in ("CACHE", "CONFIG", "DATA"):
            env[f"HELM_{kind}_HOME"] = str(self.workdir / "helm" / kind.lower())
        return env

    def _run(
        self,
        exe: str,
        args: Sequence[str | os.PathLike[str]],
        *,
        input: str | None,
        check: bool,
        timeout: float,
    ) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bin_dir / exe), *map(str, args)]
        proc = subprocess.run(
            cmd,
            input=input,
            capture_output=True,
            text=True,
            env=self.env(),
            timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            raise KubectlError(proc.returncode, cmd, proc.stdout, proc.stderr)
        return proc

    def kubectl(
        self,
        *args: str | os.PathLike[str],
        input: str | None = None,
        check: bool = True,
        timeout: float = 60.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run the built kubectl against this plane (raises ``KubectlError`` if check)."""
        return self._run("kubectl", args, input=input, check=check, timeout=timeout)

    def kubectl_json(self, *args: str | os.PathLike[str], timeout: float = 60.0) -> Any:
        """``kubectl <args> -o json``, parsed."""
        return json.loads(self.kubectl(*args, "-o", "json", timeout=timeout).stdout)

    def helm(
        self,
        *args: str | os.PathLike[str],
        input: str | None = None,
        check: bool = True,
        timeout: float = 300.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run the built helm against this plane."""
        return self._run("helm", args, input=input, check=check, timeout=timeout)

    def apply(self, *objs: dict[str, Any], namespace: str | None = None) -> None:
        """``kubectl apply`` the given objects."""
        ns = ["-n", namespace] if namespace else []
        doc = {"apiVersion": "v1", "kind": "List", "items": list(objs)}
        self.kubectl("apply", *ns, "-f", "-", input=json.dumps(doc))

    def add_nodes(self, nodes: Iterable[FakeNode], *, timeout: float = 60.0) -> None:
        """Create fake Nodes and wait until kwok has made them Ready."""
        new = list(nodes)
        if not new:
            return
        self.apply(*(n.manifest() for n in new))
        self.nodes.extend(new)
        names = {n.name for n in new}

        def all_ready() -> bool:
            nodes = self.kubectl_json("get", "nodes")["items"]
            ready = {n["metadata"]["name"] for n in nodes if _ready(n)}
            return names <= ready

        wait_until(
            all_ready, timeout=timeout, what=f"nodes {sorted(names)} Ready", check=self.check_alive
        )

    def node_ready(self, name: str) -> bool | None:
        """The Node's Ready condition: True, False (False or Unknown), None (not reported)."""
        return _ready(self.kubectl_json("get", "node", name))

    def wait_node_ready(self, name: str, *, ready: bool = True, timeout: float = 60.0) -> None:
        """Wait until ``node_ready(name) is ready``."""
        wait_until(
            lambda: self.node_ready(name) is ready,
            timeout=timeout,
            what=f"node {name} Ready={ready}",
            check=self.check_alive,
        )

    def stop_heartbeat(self, name: str) -> None:
        """Make kwok let go of a Node: its lease is no longer renewed, so after the
        controller-manager's ``--node-monitor-grace-period`` it goes NotReady/Unknown and its
        pods stay as they are (Terminating once evicted) - a node that became unreachable."""
        self.kubectl("label", "node", name, f"{KWOK_LABEL[0]}={KWOK_PAUSED}", "--overwrite")

    def resume_heartbeat(self, name: str) -> None:
        """Give a Node back to kwok (it becomes Ready again)."""
        self.kubectl("label", "node", name, f"{KWOK_LABEL[0]}={KWOK_LABEL[1]}", "--overwrite")

    # ---- lifecycle

    def check_alive(self) -> None:
        """Raise ``ControlPlaneError`` if a component has exited."""
        for p in self.processes:
            if not is_alive(p.pid, p.exe):
                raise ControlPlaneError(f"{p.name} exited; last log lines:\n{log_tail(p.log)}")

    def stop(self, *, timeout: float = 15.0) -> None:
        """Stop every component (newest first): SIGTERM, then SIGKILL after ``timeout``."""
        procs = self.processes or read_pids(self.workdir)
        for p in reversed(procs):
            terminate(p, timeout)
        self.processes = []
        with contextlib.suppress(FileNotFoundError):
            (self.workdir / "pids").unlink()
        shutil.rmtree(self.workdir / "etcd-data", ignore_errors=True)

    def __enter__(self) -> ControlPlane:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _ready(node: dict[str, Any]) -> bool | None:
    for cond in node.get("status", {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return None
