"""A real Kubernetes control plane on loopback for the operator tests.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok, built by
``scripts/k8s/build`` and started here on 127.0.0.1 with free ports and a scratch directory:
a throw-away CA and serving certificate, a service-account key pair, a static admin token in
``system:masters``, then fake Nodes (kwok) labelled like an EKS c5n node group plus nodes of
another instance type. One implementation serves the pytest fixture (``tests/k8s/conftest.py``,
``start()`` / ``ControlPlane.stop()``) and the shell (``scripts/k8s/up`` / ``scripts/k8s/down``,
which run this file). See docs/testing-k8s.md.

The parts beside this file: control_plane (the running plane, ``ControlPlane``), fake_nodes,
plane_credentials (certificates, keys, kubeconfig) and component_processes.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import secrets
import shutil
import ssl
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TextIO

if not __package__:  # run as a file (scripts/k8s/up, down): the modules beside it
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scripts.k8s.component_processes import (  # noqa: E402
    ComponentProcess,
    die_with_parent,
    free_port,
    http_ok,
    https_ok,
    is_alive,
    read_pids,
    terminate,
    wait_until,
)
from scripts.k8s.control_plane import (  # noqa: E402
    BuildMissingError,
    ControlPlane,
    ControlPlaneError,
    KubectlError,
    bin_dir,
    versions,
)
from scripts.k8s.fake_nodes import (  # noqa: E402
    DEFAULT_NODES,
    INSTANCE_TYPE,
    KWOK_LABEL,
    NODEGROUP,
    REGION,
    ZONE,
    FakeNode,
    c5n_node,
    m5_node,
)
from scripts.k8s.plane_credentials import LOOPBACK, kubeconfig_document, make_pki  # noqa: E402

__all__ = [  # what tests/k8s and docs/testing-k8s.md import from here
    "DEFAULT_NODES",
    "INSTANCE_TYPE",
    "NODEGROUP",
    "REGION",
    "ZONE",
    "BuildMissingError",
    "ControlPlane",
    "ControlPlaneError",
    "FakeNode",
    "KubectlError",
    "attach",
    "c5n_node",
    "m5_node",
    "start",
    "versions",
]


def start(
    workdir: Path,
    *,
    nodes: Iterable[FakeNode] = DEFAULT_NODES,
    detach: bool = False,
    node_monitor_grace_period: str = "30s",
    extra_apiserver_args: Sequence[str] = (),
    timeout: float = 180.0,
    log: TextIO | None = None,
) -> ControlPlane:
    """Start the plane in ``workdir`` (created; logs in ``workdir/logs``) and return it once
    every fake Node is Ready.

    ``detach=True`` (``scripts/k8s/up``) lets the components outlive this process; otherwise
    they are killed if it dies. ``node_monitor_grace_period``: how long after its last lease
    renewal a Node whose heartbeat stopped is marked NotReady.
    """
    t0 = time.monotonic()

    def say(msg: str) -> None:
        if log is not None:
            print(f"[k8s {time.monotonic() - t0:5.1f}s] {msg}", file=log, flush=True)

    bins = bin_dir()
    workdir = workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    if read_pids(workdir) and any(is_alive(p.pid, p.exe) for p in read_pids(workdir)):
        raise ControlPlaneError(f"a control plane is already running in {workdir}")
    logs = workdir / "logs"
    logs.mkdir(exist_ok=True)
    pki = make_pki(workdir / "pki")
    token = secrets.token_hex(24)
    (workdir / "tokens.csv").write_text(f'{token},xmq-admin,xmq-admin,"system:masters"\n')
    (workdir / "tokens.csv").chmod(0o600)

    etcd_port, etcd_peer, api_port, kcm_port, sched_port = (free_port() for _ in range(5))
    api_url = f"https://{LOOPBACK}:{api_port}"
    kubeconfig = workdir / "kubeconfig"
    kubeconfig.write_text(json.dumps(kubeconfig_document(api_url, pki.ca_cert.read_bytes(), token)))
    kubeconfig.chmod(0o600)
    plane = ControlPlane(workdir, bins, api_url, token, kubeconfig, pki.ca_cert)

    def spawn(name: str, args: list[str]) -> None:
        exe = str(bins / name)
        logf = logs / f"{name}.log"
        with logf.open("ab") as out:
            popen = subprocess.Popen(
                [exe, *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=workdir,
                start_new_session=True,
                preexec_fn=None if detach else die_with_parent,
            )
        process = ComponentProcess(name, exe, popen.pid, logf, None if detach else popen)
        plane.processes.append(process)
        with (workdir / "pids").open("a") as f:
            f.write(f"{name}\t{popen.pid}\t{exe}\n")
        say(f"started {name} (pid {popen.pid})")

    try:
        etcd_url = f"http://{LOOPBACK}:{etcd_port}"
        peer_url = f"http://{LOOPBACK}:{etcd_peer}"
        spawn(
            "etcd",
            [
                "--name=xmq-test",
                f"--data-dir={workdir / 'etcd-data'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=xmq-test={peer_url}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        wait_until(
            lambda: http_ok(f"{etcd_url}/health"),
            timeout=timeout,
            what="etcd /health",
            check=plane.check_alive,
        )
        say("etcd healthy")
        spawn(
            "kube-apiserver",
            [
                f"--etcd-servers={etcd_url}",
                f"--bind-address={LOOPBACK}",
                f"--advertise-address={LOOPBACK}",
                f"--secure-port={api_port}",
                f"--cert-dir={workdir / 'apiserver-certs'}",
                f"--tls-cert-file={pki.serving_cert}",
                f"--tls-private-key-file={pki.serving_key}",
                f"--client-ca-file={pki.ca_cert}",
                f"--token-auth-file={workdir / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                "--service-cluster-ip-range=10.0.0.0/24",
                "--endpoint-reconciler-type=none",
                "--disable-admission-plugins=ServiceAccount",
                "--allow-privileged=true",
                "--profiling=false",
                *extra_apiserver_args,
            ],
        )
        ctx = ssl.create_default_context(cafile=str(pki.ca_cert))
        wait_until(
            lambda: https_ok(f"{api_url}/readyz", ctx, token),
            timeout=timeout,
            what="kube-apiserver /readyz",
            check=plane.check_alive,
        )
        say(f"kube-apiserver ready at {api_url}")
        spawn(
            "kube-controller-manager",
            [
                f"--kubeconfig={kubeconfig}",
                "--leader-elect=false",
                f"--bind-address={LOOPBACK}",
                f"--secure-port={kcm_port}",
                f"--cert-dir={workdir / 'kcm-certs'}",
                f"--service-account-private-key-file={pki.sa_key}",
                f"--root-ca-file={pki.ca_cert}",
                f"--cluster-signing-cert-file={pki.ca_cert}",
                f"--cluster-signing-key-file={pki.ca_key}",
                "--use-service-account-credentials=false",
                "--service-cluster-ip-range=10.0.0.0/24",
                f"--node-monitor-grace-period={node_monitor_grace_period}",
                "--node-monitor-period=2s",
                "--profiling=false",
            ],
        )
        spawn(
            "kube-scheduler",
            [
                f"--kubeconfig={kubeconfig}",
                "--leader-elect=false",
                f"--bind-address={LOOPBACK}",
                f"--secure-port={sched_port}",
                "--profiling=false",
            ],
        )
        stages = sorted((bins.parent / "kwok-stages").glob("*.yaml"))
        spawn(
            "kwok",
            [
                f"--kubeconfig={kubeconfig}",
                f"--manage-nodes-with-label-selector={KWOK_LABEL[0]}={KWOK_LABEL[1]}",
                "--cidr=10.244.0.0/16",
                f"--node-ip={LOOPBACK}",
                "--node-lease-duration-seconds=40",
                *(f"--config={s}" for s in stages),
            ],
        )
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE  # self-signed /healthz on loopback
        for name, port in (("kube-controller-manager", kcm_port), ("kube-scheduler", sched_port)):
            wait_until(
                functools.partial(https_ok, f"https://{LOOPBACK}:{port}/healthz", insecure),
                timeout=timeout,
                what=f"{name} /healthz",
                check=plane.check_alive,
            )
        say("controller-manager and scheduler healthy")
        plane.add_nodes(nodes, timeout=timeout)
        say(f"{len(plane.nodes)} fake nodes Ready; kubeconfig {kubeconfig}")
    except BaseException:
        plane.stop()
        raise
    return plane


def attach(workdir: Path) -> ControlPlane:
    """A handle on a plane started (detached) in ``workdir`` by another process."""
    workdir = workdir.resolve()
    kubeconfig = workdir / "kubeconfig"
    cfg = json.loads(kubeconfig.read_text())
    plane = ControlPlane(
        workdir,
        bin_dir(),
        cfg["clusters"][0]["cluster"]["server"],
        cfg["users"][0]["user"]["token"],
        kubeconfig,
        workdir / "pki" / "ca.crt",
    )
    plane.processes = read_pids(workdir)
    return plane


def _default_state_dir() -> Path:
    tmp = os.environ.get("TMPDIR", "/tmp")
    return Path(os.environ.get("XMQ_K8S_DIR", f"{tmp}/xmq-k8s"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("command", choices=["up", "down", "status"])
    parser.add_argument(
        "--dir",
        type=Path,
        default=_default_state_dir(),
        help="state directory (default: $XMQ_K8S_DIR or $TMPDIR/xmq-k8s)",
    )
    args = parser.parse_args(argv)
    workdir: Path = args.dir
    if args.command == "up":
        try:
            plane = start(workdir, detach=True, log=sys.stderr)
        except BuildMissingError as e:
            print(e, file=sys.stderr)
            return 1
        print(f"export KUBECONFIG={plane.kubeconfig}")
        print(f'export PATH="{plane.bin_dir}:$PATH"')
        print(f"# API {plane.api_url}; logs in {workdir / 'logs'}; stop with scripts/k8s/down")
        return 0
    procs = read_pids(workdir.resolve())
    if args.command == "status":
        for p in procs:
            print(f"{p.name:24} pid {p.pid:7} {'running' if is_alive(p.pid, p.exe) else 'gone'}")
        return 0 if procs and all(is_alive(p.pid, p.exe) for p in procs) else 1
    if not procs:
        print(f"no control plane recorded in {workdir}", file=sys.stderr)
        return 0
    for p in reversed(procs):
        terminate(p, 15.0)
    with contextlib.suppress(FileNotFoundError):
        (workdir / "pids").unlink()
    shutil.rmtree(workdir / "etcd-data", ignore_errors=True)
    print(f"stopped {len(procs)} processes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
