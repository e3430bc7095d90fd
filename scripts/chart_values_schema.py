"""Write ``cluster.spec`` of charts/xmq/values.schema.json from the XmqCluster CRD's schema.

    .venv/bin/python scripts/chart_values_schema.py          rewrite the file
    .venv/bin/python scripts/chart_values_schema.py --check  exit 1 when it is out of date

So ``helm install --set cluster.enabled=true`` with a bad spec fails at template time (nothing
applied, no failed release) on what the API server's schema would refuse: types, enums,
ranges, patterns (resource quantities), required fields, and unknown fields (which the API
server would silently drop). CEL rules stay the API server's. crds/xmqcluster.yaml is the
single source; tests/unit/xmq_operator/test_chart_values_schema.py checks the file is current.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CRD = ROOT / "crds" / "xmqcluster.yaml"
VALUES_SCHEMA = ROOT / "charts" / "xmq" / "values.schema.json"

_DROPPED = {"default", "description", "format"}


def json_schema(openapi: dict[str, Any]) -> dict[str, Any]:
    """A draft-07 JSON Schema of one structural OpenAPI v3 schema (of a CRD)."""
    out: dict[str, Any] = {}
    open_object = bool(openapi.get("x-kubernetes-preserve-unknown-fields"))
    for key, value in openapi.items():
        if key in _DROPPED or key.startswith("x-kubernetes-"):
            continue
        if key == "properties":
            out[key] = {name: json_schema(sub) for name, sub in value.items()}
        elif key in {"items", "additionalProperties"} and isinstance(value, dict):
            out[key] = json_schema(value)
        elif key == "anyOf":
            out[key] = [json_schema(sub) for sub in value]
        else:
            out[key] = value
    if openapi.get("x-kubernetes-int-or-string") and "pattern" in out:
        # A quantity. JSON Schema applies ``pattern`` to strings only, as the CRD does; the
        # CRD refuses negative integers with a CEL rule, said here with ``minimum``.
        out["anyOf"] = [
            {**alt, "pattern": out["pattern"]}
            if alt.get("type") == "string"
            else {**alt, "minimum": 0}
            for alt in out["anyOf"]
        ]
        del out["pattern"]
    if out.get("type") == "object" and "properties" in out and not open_object:
        out.setdefault("additionalProperties", False)
    return out


def crd_spec_schema(crd_text: str) -> dict[str, Any]:
    crd = yaml.safe_load(crd_text)
    (version,) = crd["spec"]["versions"]
    return json_schema(version["schema"]["openAPIV3Schema"]["properties"]["spec"])


def rendered(values_schema_text: str, crd_text: str) -> str:
    """The values schema with ``cluster.spec`` taken from the CRD."""
    schema = json.loads(values_schema_text)
    schema["properties"]["cluster"]["properties"]["spec"] = crd_spec_schema(crd_text)
    return json.dumps(schema, indent=2) + "\n"


def main(argv: list[str]) -> int:
    current = VALUES_SCHEMA.read_text()
    wanted = rendered(current, CRD.read_text())
    if "--check" in argv:
        if current != wanted:
            print(f"{VALUES_SCHEMA} is out of date: run scripts/chart_values_schema.py")
            return 1
        return 0
    VALUES_SCHEMA.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
