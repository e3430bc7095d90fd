"""The project builds as one wheel that carries both import packages and both entry points,
and runs from that wheel alone (what the Dockerfile's stages do, without a Docker engine)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "--wheel-dir",
            str(out),
            str(REPO),
        ],
        check=True,
        timeout=300,
    )
    [built] = list(out.glob("xmq-*.whl"))
    return built


def test_wheel_contents(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert "xmq/__init__.py" in names
    assert "xmq_operator/__init__.py" in names
    assert "operator/__init__.py" not in names  # never shadow the standard library
    assert not [n for n in names if n.startswith(("tests/", "broker/", "scripts/"))]
    [entry_points] = [n for n in names if n.endswith("entry_points.txt")]
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "xmq = xmq.app.cli:main" in text
    assert "xmq-operator = xmq_operator.main:main" in text


def test_installed_wheel_runs_without_the_source_tree(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        timeout=300,
    )
    env = dict(os.environ, PYTHONPATH=str(target))
    # -I would drop PYTHONPATH; -s and a neutral cwd keep the editable source tree out of sight
    code = (
        "import sys, xmq, xmq_operator, xmq.app.server, xmq_operator.handlers;"
        f"assert xmq.__file__.startswith({str(target)!r}), xmq.__file__;"
        f"assert xmq_operator.__file__.startswith({str(target)!r});"
        "print(xmq.__version__)"
    )
    done = subprocess.run(
        [sys.executable, "-s", "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    check = tmp_path / "xmq.yaml"
    check.write_text("listeners:\n  - {name: mqtt, port: 1884}\n")
    ran = subprocess.run(
        [sys.executable, "-s", "-m", "xmq", "check-config", "--no-bind", str(check)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
