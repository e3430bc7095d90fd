"""A real Kubernetes control plane on loopback for the operator tests.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok, built by
``scripts/k8s/build`` and started here on 127.0.0.1 with free ports and a scratch directory:
a throw-away CA and serving certificate, a service-account key pair, a static admin token in
``system:masters``, then fake Nodes (kwok) labelled like an EKS c5n node group plus nodes of
another instance type. One implementation serves the pytest fixture (``tests/k8s/conftest.py``,
``start()`` / ``ControlPlane.stop()``) and the shell (``scripts/k8s/up`` / ``scripts/k8s/down``,
which run this file). See docs/testing-k8s.md.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import datetime
import functools
import ipaddress
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "scripts" / "k8s" / "build"
VERSIONS_FILE = REPO / "scripts" / "k8s" / "versions.env"
LOOPBACK = "127.0.0.1"
CONTEXT = "xmq-test"
#: Label that makes kwok manage a Node (``--manage-nodes-with-label-selector``).
KWOK_LABEL = ("type", "kwok")
#: Value of the ``type`` label on a Node whose heartbeat was stopped (see ``stop_heartbeat``).
KWOK_PAUSED = "kwok-paused"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
NODEGROUP = "eks.amazonaws.com/nodegroup"
ZONE = "topology.kubernetes.io/zone"
REGION = "us-east-1"


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


# ---------------------------------------------------------------------------- fake nodes


@dataclass(frozen=True)
class FakeNode:
    """A Node that kwok keeps Ready (status, heartbeat lease) and whose pods it runs."""

    name: str
    instance_type: str
    zone: str
    nodegroup: str
    cpu: str
    memory: str
    pods: int = 110
    labels: tuple[tuple[str, str], ...] = ()

    def manifest(self) -> dict[str, Any]:
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "node.kubernetes.io/instance-type": self.instance_type,
            "beta.kubernetes.io/instance-type": self.instance_type,
            "topology.kubernetes.io/region": REGION,
            "topology.kubernetes.io/zone": self.zone,
            "eks.amazonaws.com/nodegroup": self.nodegroup,
            "eks.amazonaws.com/capacityType": "ON_DEMAND",
            KWOK_LABEL[0]: KWOK_LABEL[1],
            **dict(self.labels),
        }
        resources = {"cpu": self.cpu, "memory": self.memory, "pods": str(self.pods)}
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": labels,
                "annotations": {
                    "kwok.x-k8s.io/node": "fake",
                    "node.alpha.kubernetes.io/ttl": "0",
                },
            },
            "spec": {"providerID": f"kwok://{REGION}/{self.name}"},
            "status": {"allocatable": resources, "capacity": resources},
        }


def c5n_node(name: str, zone: str, **kw: Any) -> FakeNode:
    """A node of the EKS ``xmq-c5n`` node group (c5n.2xlarge: 8 vCPU, 21 GiB)."""
    return FakeNode(name, "c5n.2xlarge", zone, "xmq-c5n", "8", "21Gi", **kw)


def m5_node(name: str, zone: str, **kw: Any) -> FakeNode:
    """A node of a general-purpose node group (m5.large: 2 vCPU, 8 GiB)."""
    return FakeNode(name, "m5.large", zone, "general-m5", "2", "8Gi", **kw)


#: Five c5n nodes per zone (us-east-1a/b), so that four brokers fit one per node in a single
#: zone with one spare, plus two m5.large nodes that brokers must never land on.
DEFAULT_NODES: tuple[FakeNode, ...] = (
    *(c5n_node(f"c5n-{z}{i}", f"{REGION}{z}") for z in "ab" for i in range(1, 6)),
    m5_node("m5-a1", f"{REGION}a"),
    m5_node("m5-b1", f"{REGION}b"),
)


# ---------------------------------------------------------------------------- helpers


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def wait_until(
    predicate: Callable[[], bool],
    *,
    timeout: float,
    interval: float = 0.5,
    what: str = "condition",
    check: Callable[[], None] | None = None,
) -> None:
    """Poll ``predicate`` until true; ``check`` may raise to abort early (a component died)."""
    deadline = time.monotonic() + timeout
    while True:
        if check is not None:
            check()
        if predicate():
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _pem_key(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


@dataclass(frozen=True)
class _Pki:
    ca_cert: Path
    ca_key: Path
    serving_cert: Path
    serving_key: Path
    sa_key: Path
    sa_pub: Path


def _make_pki(d: Path) -> _Pki:
    """A throw-away CA, an apiserver serving certificate, and a service-account key pair."""
    d.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    not_before, not_after = now - datetime.timedelta(hours=1), now + datetime.timedelta(days=7)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "xmq-test-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [
        x509.IPAddress(ipaddress.ip_address(LOOPBACK)),
        x509.IPAddress(ipaddress.ip_address("10.0.0.1")),
        x509.DNSName("localhost"),
        *(
            x509.DNSName(n)
            for n in (
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            )
        ),
    ]
    serving = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pki = _Pki(
        ca_cert=d / "ca.crt",
        ca_key=d / "ca.key",
        serving_cert=d / "apiserver.crt",
        serving_key=d / "apiserver.key",
        sa_key=d / "sa.key",
        sa_pub=d / "sa.pub",
    )
    pki.ca_cert.write_bytes(_pem_cert(ca))
    pki.ca_key.write_bytes(_pem_key(ca_key))
    pki.serving_cert.write_bytes(_pem_cert(serving))
    pki.serving_key.write_bytes(_pem_key(key))
    pki.sa_key.write_bytes(_pem_key(sa))
    pki.sa_pub.write_bytes(
        sa.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    for p in (pki.ca_key, pki.serving_key, pki.sa_key):
        p.chmod(0o600)
    return pki


def _kubeconfig(api_url: str, ca_pem: bytes, token: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": CONTEXT,
                "cluster": {
                    "server": api_url,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": "xmq-admin", "user": {"token": token}}],
        "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": "xmq-admin"}}],
        "current-context": CONTEXT,
        "preferences": {},
    }


def _pdeathsig() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Kill the child if the test process dies without tearing down (e.g. SIGKILL)."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)


def _alive(pid: int, exe: str) -> bool:
    """Is ``pid`` still the process we started (not a zombie, not a reused pid)?"""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    argv0 = cmdline.split(b"\0", 1)[0].decode(errors="replace")
    # cmdline is briefly empty while the child execs.
    return state != "Z" and argv0 in ("", exe)


# ---------------------------------------------------------------------------- the plane


@dataclass
class _Proc:
    name: str
    exe: str
    pid: int
    log: Path
    popen: subprocess.Popen[bytes] | None = None


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
    _procs: list[_Proc] = field(default_factory=list, repr=False)

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
        for p in self._procs:
            if not _alive(p.pid, p.exe):
                raise ControlPlaneError(f"{p.name} exited; last log lines:\n{_tail(p.log)}")

    def stop(self, *, timeout: float = 15.0) -> None:
        """Stop every component (newest first): SIGTERM, then SIGKILL after ``timeout``."""
        procs = self._procs or _read_pids(self.workdir)
        for p in reversed(procs):
            _terminate(p, timeout)
        self._procs = []
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


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as e:
        return f"(no log: {e})"


def _terminate(p: _Proc, timeout: float) -> None:
    if not _alive(p.pid, p.exe):
        if p.popen is not None:
            p.popen.wait()
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _alive(p.pid, p.exe) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(p.pid, p.exe):
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGKILL)
    if p.popen is not None:
        p.popen.wait(timeout=timeout)
    else:
        deadline = time.monotonic() + timeout
        while _alive(p.pid, p.exe) and time.monotonic() < deadline:
            time.sleep(0.1)


def _read_pids(workdir: Path) -> list[_Proc]:
    try:
        lines = (workdir / "pids").read_text().splitlines()
    except FileNotFoundError:
        return []
    procs = []
    for line in lines:
        name, pid, exe = line.split("\t")
        procs.append(_Proc(name, exe, int(pid), workdir / "logs" / f"{name}.log"))
    return procs


def _https_ok(url: str, ctx: ssl.SSLContext, token: str | None = None) -> bool:
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=5) as resp:
            return bool(resp.status == 200)
    except urllib.error.HTTPError as e:  # e.g. 500 from /readyz while starting
        e.close()
        return False
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return False


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return bool(resp.status == 200)
    except urllib.error.HTTPError as e:
        e.close()
        return False
    except (urllib.error.URLError, OSError):
        return False


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
    if _read_pids(workdir) and any(_alive(p.pid, p.exe) for p in _read_pids(workdir)):
        raise ControlPlaneError(f"a control plane is already running in {workdir}")
    logs = workdir / "logs"
    logs.mkdir(exist_ok=True)
    pki = _make_pki(workdir / "pki")
    token = secrets.token_hex(24)
    (workdir / "tokens.csv").write_text(f'{token},xmq-admin,xmq-admin,"system:masters"\n')
    (workdir / "tokens.csv").chmod(0o600)

    etcd_port, etcd_peer, api_port, kcm_port, sched_port = (free_port() for _ in range(5))
    api_url = f"https://{LOOPBACK}:{api_port}"
    kubeconfig = workdir / "kubeconfig"
    kubeconfig.write_text(json.dumps(_kubeconfig(api_url, pki.ca_cert.read_bytes(), token)))
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
                preexec_fn=None if detach else _pdeathsig,
            )
        plane._procs.append(_Proc(name, exe, popen.pid, logf, None if detach else popen))
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
            lambda: _http_ok(f"{etcd_url}/health"),
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
            lambda: _https_ok(f"{api_url}/readyz", ctx, token),
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
                functools.partial(_https_ok, f"https://{LOOPBACK}:{port}/healthz", insecure),
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
    plane._procs = _read_pids(workdir)
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
    procs = _read_pids(workdir.resolve())
    if args.command == "status":
        for p in procs:
            print(f"{p.name:24} pid {p.pid:7} {'running' if _alive(p.pid, p.exe) else 'gone'}")
        return 0 if procs and all(_alive(p.pid, p.exe) for p in procs) else 1
    if not procs:
        print(f"no control plane recorded in {workdir}", file=sys.stderr)
        return 0
    for p in reversed(procs):
        _terminate(p, 15.0)
    with contextlib.suppress(FileNotFoundError):
        (workdir / "pids").unlink()
    shutil.rmtree(workdir / "etcd-data", ignore_errors=True)
    print(f"stopped {len(procs)} processes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
