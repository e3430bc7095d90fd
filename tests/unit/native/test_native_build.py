"""The compiled or pure build of the hot modules: what loads, and when compiled code must not.

``scripts/test`` runs the unit suite twice: against the mypyc build (``XMQ_EXPECT_BUILD=compiled``)
and with ``XMQ_PURE=1`` (``XMQ_EXPECT_BUILD=pure``); the first test fails either run if the
other build is the one imported.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from xmq.native_build import (
    BUILD,
    BUILD_REASON,
    NATIVE_MODULES,
    STAMP,
    loaded_build,
    source_record,
    stamp_problem,
)
from xmq.observability.broker_metrics import build_info

SUFFIX = importlib.machinery.EXTENSION_SUFFIXES[0]


def test_the_build_loaded_is_the_one_expected() -> None:
    loaded = loaded_build()
    assert set(loaded.values()) == {BUILD}, loaded
    if os.environ.get("XMQ_PURE", "") not in ("", "0"):
        assert BUILD == "pure"
    expected = os.environ.get("XMQ_EXPECT_BUILD")
    if expected:
        assert expected == BUILD, f"expected the {expected} build, running {BUILD}: {BUILD_REASON}"


def test_build_info_metric_names_the_build() -> None:
    (sample,) = build_info().samples
    assert sample.name == "xmq_build_info"
    assert sample.labels["build"] == BUILD
    assert sample.value == 1


def _run(code: str, **env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k != "XMQ_PURE"} | env
    result = subprocess.run(
        [sys.executable, "-c", code], env=environ, capture_output=True, text=True, check=True
    )
    return result.stdout.strip()


def test_xmq_pure_forces_the_source_even_when_compiled() -> None:
    code = "from xmq.native_build import loaded_build; print(sorted(set(loaded_build().values())))"
    assert _run(code, XMQ_PURE="1") == "['pure']"
    version = _run("import sys; from xmq.app.cli import main; sys.argv=['xmq','--version']; main()")
    expected = "compiled" if stamp_problem() is None else "pure"
    assert f"({expected} build" in version


def _package(tmp_path: Path) -> Path:
    """A package dir with sources, an extension per native module and a matching stamp."""
    package = tmp_path / "xmq"
    (package / "codec").mkdir(parents=True)
    (package / "codec" / "wire.py").write_text("X = 1\n")
    (package / "native_build.py").write_text("# build\n")
    for name in NATIVE_MODULES:
        ext = package / (name.removeprefix("xmq.").replace(".", "/") + SUFFIX)
        ext.parent.mkdir(parents=True, exist_ok=True)
        ext.write_bytes(b"")
    record = {"python": sys.implementation.cache_tag, "sources": source_record(package)}
    (package / STAMP.name).write_text(json.dumps(record))
    return package


def test_a_matching_stamp_lets_the_compiled_modules_load(tmp_path: Path) -> None:
    package = _package(tmp_path)
    assert stamp_problem(package) is None
    wire = package / "codec" / "wire.py"
    os.utime(wire, ns=(1, 1))  # touched (a checkout), same bytes: still the compiled source
    assert stamp_problem(package) is None


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda p: (p / "codec" / "wire.py").write_text("X = 2\n"), "codec/wire.py changed"),
        (lambda p: (p / "codec" / "new.py").write_text(""), "added or removed"),
        (lambda p: (p / "codec" / "wire.py").unlink(), "added or removed"),
        (lambda p: (p / "codec" / f"reader{SUFFIX}").unlink(), "missing"),
        (lambda p: (p / STAMP.name).unlink(), "not built"),
        (lambda p: (p / STAMP.name).write_text("{"), "unreadable"),
        (
            lambda p: (p / STAMP.name).write_text(json.dumps({"python": "cpython-30"})),
            "built for cpython-30",
        ),
    ],
    ids=[
        "edited",
        "added",
        "removed",
        "extension-missing",
        "no-stamp",
        "bad-stamp",
        "other-python",
    ],
)
def test_compiled_code_that_may_not_match_the_source_is_refused(
    tmp_path: Path, change: Callable[[Path], object], problem: str
) -> None:
    package = _package(tmp_path)
    change(package)
    found = stamp_problem(package)
    assert found is not None
    assert problem in found
