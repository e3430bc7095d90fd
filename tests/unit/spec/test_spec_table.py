"""docs/spec-coverage.md cannot go stale, and every spec mark cites a listed statement."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.spec_coverage import (
    SERVER_BINDING,
    VERSIONS,
    load_statements,
    render,
    scan_tests,
)

ROOT = Path(__file__).resolve().parents[3]


def test_every_cited_statement_is_listed() -> None:
    marks, problems = scan_tests(ROOT)
    assert problems == []
    assert {m.version for m in marks} == set(VERSIONS)


def test_the_table_is_what_the_generator_writes() -> None:
    table = (ROOT / "docs" / "spec-coverage.md").read_text(encoding="utf-8")
    assert table == render(ROOT), "docs/spec-coverage.md is stale: run scripts/spec-table"


def test_the_check_mode_of_the_script_agrees() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "spec-table"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_statement_lists_are_well_formed() -> None:
    for version in VERSIONS:
        statements = load_statements(ROOT, version)
        assert len(statements) > 100
        assert any(s.binds in SERVER_BINDING for s in statements.values())


def test_unknown_and_malformed_ids_are_reported(tmp_path: Path) -> None:
    (tmp_path / "docs" / "spec").mkdir(parents=True)
    for version in VERSIONS:
        source = ROOT / "docs" / "spec" / VERSIONS[version][1]
        (tmp_path / "docs" / "spec" / source.name).write_text(source.read_text(encoding="utf-8"))
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_x.py").write_text(
        "import pytest\n\n"
        '@pytest.mark.spec("5:MQTT-3.3.2-14", "5:MQTT-9.9.9-9", "MQTT-3.1.0-1")\n'
        "def test_a():\n    pass\n\n"
        '@pytest.mark.parametrize("x", [pytest.param(1, marks=[pytest.mark.spec("3:MQTT-3.1.0-2"),'
        " pytest.mark.xfail(strict=True)]), 2])\n"
        "def test_b(x):\n    pass\n"
    )
    marks, problems = scan_tests(tmp_path)
    assert [(m.version, m.id, m.test, m.known_violation) for m in marks] == [
        ("5", "MQTT-3.3.2-14", "tests/test_x.py::test_a", False),
        ("3", "MQTT-3.1.0-2", "tests/test_x.py::test_b", True),
    ]
    assert len(problems) == 2
