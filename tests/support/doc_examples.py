"""The YAML examples of the docs (fenced ```yaml blocks in docs/*.md), parsed."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

DOCS = Path(__file__).resolve().parents[2] / "docs"
_FENCE = re.compile(r"^```ya?ml[ \t]*\n(.*?)^```", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True, slots=True)
class YamlExample:
    """One fenced block: where it is and its text."""

    path: Path
    line: int
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.name}:{self.line}"

    def documents(self) -> list[Any]:
        return [doc for doc in yaml.safe_load_all(self.text) if doc is not None]


def yaml_examples() -> list[YamlExample]:
    examples = []
    for path in sorted(DOCS.glob("*.md")):
        text = path.read_text()
        for match in _FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 2
            examples.append(YamlExample(path, line, match.group(1)))
    return examples


def xmqcluster_examples() -> list[tuple[YamlExample, dict[str, Any]]]:
    return [
        (example, doc)
        for example in yaml_examples()
        for doc in example.documents()
        if isinstance(doc, dict) and doc.get("kind") == "XmqCluster"
    ]
