"""Shell scripts under ``set -o pipefail`` never pipe into a reader that may exit early
(``grep -q``, ``head``): the writer then dies of SIGPIPE and the pipeline fails with 141 at
random (scripts/k8s/build's etcd version check failed 3 runs in 10 on a fresh machine)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[3] / "scripts"
EARLY_EXIT = re.compile(r"\|\s*(grep\s+-[A-Za-z]*q|head\b)")


def _pipefail_scripts() -> list[Path]:
    return [
        path
        for path in sorted(SCRIPTS.rglob("*"))
        if path.is_file()
        and path.read_bytes().startswith(b"#!/usr/bin/env bash")
        and "pipefail" in path.read_text()
    ]


def test_the_hazard_is_real() -> None:
    done = subprocess.run(
        ["bash", "-c", "set -o pipefail; yes | grep -q y"], check=False, timeout=10
    )
    assert done.returncode == 141


def test_no_pipefail_script_pipes_into_an_early_exiting_reader() -> None:
    scripts = _pipefail_scripts()
    assert any(path.name == "build" for path in scripts)
    offenders = [
        f"{path.relative_to(SCRIPTS)}:{number}: {line.strip()}"
        for path in scripts
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if EARLY_EXIT.search(line) and not line.lstrip().startswith("#")
    ]
    assert offenders == []
