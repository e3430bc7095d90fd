"""The test control plane's component processes: started, recorded, checked, stopped.

Each component (etcd, kube-apiserver, ...) is a process whose pid, executable and log are kept
in the state directory's ``pids`` file, so that ``scripts/k8s/down`` can stop a plane that
another process started; and the waits on their health endpoints.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from scripts.k8s.plane_credentials import LOOPBACK


@dataclass
class ComponentProcess:
    """One started component: its name, executable, pid and log (``popen``: when this
    process started it without detaching, the handle that reaps it)."""

    name: str
    exe: str
    pid: int
    log: Path
    popen: subprocess.Popen[bytes] | None = None


def die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Kill the child if the test process dies without tearing down (e.g. SIGKILL)."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)


def is_alive(pid: int, exe: str) -> bool:
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


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as e:
        return f"(no log: {e})"


def terminate(p: ComponentProcess, timeout: float) -> None:
    if not is_alive(p.pid, p.exe):
        if p.popen is not None:
            p.popen.wait()
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while is_alive(p.pid, p.exe) and time.monotonic() < deadline:
        time.sleep(0.1)
    if is_alive(p.pid, p.exe):
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGKILL)
    if p.popen is not None:
        p.popen.wait(timeout=timeout)
    else:
        deadline = time.monotonic() + timeout
        while is_alive(p.pid, p.exe) and time.monotonic() < deadline:
            time.sleep(0.1)


def read_pids(workdir: Path) -> list[ComponentProcess]:
    try:
        lines = (workdir / "pids").read_text().splitlines()
    except FileNotFoundError:
        return []
    procs = []
    for line in lines:
        name, pid, exe = line.split("\t")
        procs.append(ComponentProcess(name, exe, int(pid), workdir / "logs" / f"{name}.log"))
    return procs


def https_ok(url: str, ctx: ssl.SSLContext, token: str | None = None) -> bool:
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


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return bool(resp.status == 200)
    except urllib.error.HTTPError as e:
        e.close()
        return False
    except (urllib.error.URLError, OSError):
        return False


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
