"""The MQTT specification coverage table: statement lists, the tests' spec marks, the Markdown.

Statements live in docs/spec/mqtt-5.0.tsv and docs/spec/mqtt-3.1.1.tsv; tests cite them with
``@pytest.mark.spec("5:MQTT-3.3.2-14", "3:MQTT-3.1.2-24")`` (the prefix is the protocol version:
the two specifications reuse numbers for different statements). ``render`` produces
docs/spec-coverage.md; scripts/spec-table writes it and a unit test keeps it current.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

VERSIONS = {"5": ("MQTT 5.0", "mqtt-5.0.tsv"), "3": ("MQTT 3.1.1", "mqtt-3.1.1.tsv")}
SERVER_BINDING = ("server", "both")
_ID = re.compile(r"^(?P<version>[35]):(?P<id>MQTT-(?P<section>\d+\.\d+)\.\d+-\d+)$")
_SECTIONS = {
    "1.5": "Data representation",
    "2.1": "Fixed header",
    "2.2": "Variable header",
    "2.3": "Variable header",
    "3.1": "CONNECT",
    "3.2": "CONNACK",
    "3.3": "PUBLISH",
    "3.4": "PUBACK",
    "3.5": "PUBREC",
    "3.6": "PUBREL",
    "3.7": "PUBCOMP",
    "3.8": "SUBSCRIBE",
    "3.9": "SUBACK",
    "3.10": "UNSUBSCRIBE",
    "3.11": "UNSUBACK",
    "3.12": "PINGREQ",
    "3.14": "DISCONNECT",
    "3.15": "AUTH",
    "4.1": "Session state",
    "4.2": "Network connections",
    "4.3": "Quality of Service levels",
    "4.4": "Message delivery retry",
    "4.5": "Message receipt",
    "4.6": "Message ordering",
    "4.7": "Topic names and filters",
    "4.8": "Shared subscriptions / handling errors",
    "4.9": "Flow control",
    "4.12": "Enhanced authentication",
    "4.13": "Handling errors",
    "6.0": "WebSocket",
    "7.0": "Conformance",
    "7.1": "Conformance",
}


@dataclass(frozen=True)
class Statement:
    id: str
    binds: str
    summary: str
    choice: str


@dataclass(frozen=True)
class SpecMark:
    version: str
    id: str
    test: str  # path::name, relative to the repository
    known_violation: bool


def load_statements(root: Path, version: str) -> dict[str, Statement]:
    path = root / "docs" / "spec" / VERSIONS[version][1]
    statements: dict[str, Statement] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line or line.startswith("#") or line.startswith("id\t"):
            continue
        fields = line.split("\t")
        if len(fields) != 4 or fields[1] not in ("server", "client", "both"):
            raise ValueError(f"{path.name}: bad row {line!r}")
        if fields[0] in statements:
            raise ValueError(f"{path.name}: {fields[0]} listed twice")
        statements[fields[0]] = Statement(*fields)
    return statements


def _is_mark(node: ast.AST, name: str) -> bool:
    """``pytest.mark.<name>`` or ``mark.<name>`` (called or not)."""
    if isinstance(node, ast.Call):
        node = node.func
    return (
        isinstance(node, ast.Attribute)
        and node.attr == name
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "mark"
    )


def _spec_ids(node: ast.AST, where: str) -> list[str]:
    ids: list[str] = []
    for call in ast.walk(node):
        if isinstance(call, ast.Call) and _is_mark(call, "spec"):
            for arg in call.args:
                if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
                    raise ValueError(f"{where}: spec marks take string literals")
                ids.append(arg.value)
    return ids


def _has_xfail(node: ast.AST) -> bool:
    return any(_is_mark(child, "xfail") for child in ast.walk(node))


def _is_param(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "param"
    )


def _marks_of(
    function: ast.FunctionDef | ast.AsyncFunctionDef, where: str
) -> list[tuple[str, bool]]:
    """(id, known violation) for the marks on a test and on its ``pytest.param`` cases."""
    found: list[tuple[str, bool]] = []
    params = [n for d in function.decorator_list for n in ast.walk(d) if _is_param(n)]
    param_nodes = {id(n) for p in params for n in ast.walk(p)}
    function_xfail = any(
        _is_mark(n, "xfail")
        for d in function.decorator_list
        for n in ast.walk(d)
        if id(n) not in param_nodes
    )
    for decorator in function.decorator_list:
        for node in ast.walk(decorator):
            if (
                isinstance(node, ast.Call)
                and _is_mark(node, "spec")
                and id(node) not in param_nodes
            ):
                found.extend((i, function_xfail) for i in _spec_ids(node, where))
    for param in params:
        param_xfail = function_xfail or _has_xfail(param)
        found.extend((i, param_xfail) for i in _spec_ids(param, where))
    return found


def _module_marks(tree: ast.Module, where: str) -> list[str]:
    ids: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            ids.extend(_spec_ids(node.value, where))
    return ids


def scan_tests(root: Path) -> tuple[list[SpecMark], list[str]]:
    """Every spec mark under tests/, and the problems (malformed or unknown ids)."""
    known = {v: load_statements(root, v) for v in VERSIONS}
    marks: list[SpecMark] = []
    problems: list[str] = []
    for path in sorted((root / "tests").rglob("test_*.py")):
        relative = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=relative)
        module_ids = _module_marks(tree, relative)
        tests: list[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]] = []
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                tests.append((node.name, node))
            elif isinstance(node, ast.ClassDef):
                tests.extend(
                    (f"{node.name}::{item.name}", item)
                    for item in node.body
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                )
        for name, function in tests:
            if not function.name.startswith("test"):
                continue
            where = f"{relative}::{name}"
            cited = [(i, False) for i in module_ids] + _marks_of(function, where)
            for cited_id, violation in cited:
                match = _ID.match(cited_id)
                if match is None:
                    problems.append(f"{where}: {cited_id!r} is not '5:MQTT-x.y.z-n' / '3:...'")
                elif match["id"] not in known[match["version"]]:
                    problems.append(f"{where}: {cited_id} is not in the statement list")
                else:
                    marks.append(SpecMark(match["version"], match["id"], where, violation))
    return marks, problems


def _sort_key(statement_id: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", statement_id))


def _section(statement_id: str) -> str:
    return ".".join(statement_id.removeprefix("MQTT-").split("-")[0].split(".")[:2])


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render(root: Path) -> str:
    marks, problems = scan_tests(root)
    if problems:
        raise ValueError("spec marks that cite no listed statement:\n" + "\n".join(problems))
    by_statement: dict[tuple[str, str], list[SpecMark]] = defaultdict(list)
    for mark in marks:
        by_statement[(mark.version, mark.id)].append(mark)
    lines = [
        "# MQTT specification coverage",
        "",
        "<!-- generated by scripts/spec-table from docs/spec/*.tsv and the tests' "
        "pytest.mark.spec marks; do not edit -->",
        "",
        "Every normative statement of MQTT 5.0 and 3.1.1, who it binds, the tests that check it",
        "on a real broker (or on the codec), and our behaviour where the statement leaves a",
        "choice. A statement is *covered* when a passing test cites it with",
        '`@pytest.mark.spec("5:MQTT-x.y.z-n")` (`3:` for 3.1.1); a test marked `xfail` shows as a',
        "**known violation**, never as covered. Client-only statements need no server test.",
        "",
        "| Version | Statements | Binding the server | Covered by a test | Known violations |",
        "|---|---|---|---|---|",
    ]
    sections: list[str] = []
    known: list[str] = []
    for version, (title, _) in VERSIONS.items():
        statements = load_statements(root, version)
        server = [s for s in statements.values() if s.binds in SERVER_BINDING]
        covered = [
            s for s in server if any(not m.known_violation for m in by_statement[(version, s.id)])
        ]
        violations = {
            s.id
            for s in statements.values()
            if any(m.known_violation for m in by_statement[(version, s.id)])
        }
        lines.append(
            f"| {title} | {len(statements)} | {len(server)} | {len(covered)} | {len(violations)} |"
        )
        known.extend(f"- {title} {v}" for v in sorted(violations, key=_sort_key))
        sections.append(f"\n## {title}")
        current = ""
        for statement in sorted(statements.values(), key=lambda s: _sort_key(s.id)):
            section = _section(statement.id)
            if section != current:
                current = section
                sections.append(f"\n### {section} {_SECTIONS.get(section, '')}".rstrip() + "\n")
                sections.append("| Statement | Binds | Summary | Tests | Behaviour / our choice |")
                sections.append("|---|---|---|---|---|")
            cited = {(m.test, m.known_violation) for m in by_statement[(version, statement.id)]}
            tests = [
                f"{'**known violation** ' if violation else ''}`{test}`"
                for test, violation in sorted(cited)
            ]
            behaviour = statement.choice
            if not behaviour and statement.binds == "client":
                behaviour = "client requirement: not applicable"
            sections.append(
                f"| {statement.id} | {statement.binds} | {_cell(statement.summary)} | "
                f"{'<br>'.join(tests)} | {_cell(behaviour)} |"
            )
    if known:
        lines += ["", "Known violations (their tests are `xfail(strict=True)`):", "", *known]
    return "\n".join(lines + sections) + "\n"
