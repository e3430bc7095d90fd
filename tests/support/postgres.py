"""A real PostgreSQL server for tests: initdb + postgres from the Debian binaries, in a
temporary directory, on a free loopback port, as a non-root OS user; stopped at teardown.

Only `fsync` is off: commits survive `stop("immediate")` (a crash of PostgreSQL), which the
outage tests rely on; they would not survive a crash of the machine.

    server = PostgresServer.create()
    server.start()
    dsn = server.dsn("postgres")
    ...
    server.stop()
    server.cleanup()
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

_SUPERUSER = "xmq"
_OS_USER = "postgres"


def find_bin_dir() -> Path:
    override = os.environ.get("XMQ_POSTGRES_BIN")
    if override:
        return Path(override)
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/postgres"),
        key=lambda path: int(path.split("/")[4]) if path.split("/")[4].isdigit() else 0,
    )
    if candidates:
        return Path(candidates[-1]).parent
    found = shutil.which("postgres")
    if found:
        return Path(found).parent
    raise RuntimeError("PostgreSQL server binaries not found: run scripts/setup-system")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class PostgresServer:
    bin_dir: Path
    base_dir: Path
    port: int
    run_as: str | None
    started: bool = field(default=False)

    @classmethod
    def create(cls, port: int | None = None) -> PostgresServer:
        base_dir = Path(tempfile.mkdtemp(prefix="xmq-pg-"))
        run_as = _OS_USER if os.geteuid() == 0 else None
        if run_as is not None:
            shutil.chown(base_dir, user=run_as, group=None)
        base_dir.chmod(0o755)
        server = cls(find_bin_dir(), base_dir, port or free_port(), run_as)
        server._run(
            "initdb",
            "-D",
            str(server.data_dir),
            "-U",
            _SUPERUSER,
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
            "--locale=C",
        )
        return server

    @property
    def data_dir(self) -> Path:
        return self.base_dir / "data"

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://{_SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def _command(self, program: str, *args: str) -> list[str]:
        command = [str(self.bin_dir / program), *args]
        if self.run_as is not None:
            return ["runuser", "-u", self.run_as, "--", *command]
        return command

    def _run(self, program: str, *args: str) -> None:
        result = subprocess.run(
            self._command(program, *args),
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
            cwd=self.base_dir,
        )
        if result.returncode != 0:
            raise RuntimeError(f"{program} failed: {result.stdout}\n{result.stderr}")

    def start(self) -> None:
        options = " ".join(
            [
                f"-p {self.port}",
                "-c listen_addresses=127.0.0.1",
                f"-c unix_socket_directories={self.base_dir}",
                "-c fsync=off",
                "-c full_page_writes=off",
                "-c max_connections=200",
            ]
        )
        log = str(self.base_dir / "postgres.log")
        self._run(
            "pg_ctl", "start", "-w", "-t", "60", "-D", str(self.data_dir), "-l", log, "-o", options
        )
        self.started = True

    def stop(self, mode: str = "fast") -> None:
        if self.started:
            self._run("pg_ctl", "stop", "-w", "-t", "60", "-m", mode, "-D", str(self.data_dir))
            self.started = False

    def cleanup(self) -> None:
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            self.stop("immediate")
        shutil.rmtree(self.base_dir, ignore_errors=True)

    def log_text(self) -> str:
        path = self.base_dir / "postgres.log"
        return path.read_text(errors="replace") if path.exists() else ""
