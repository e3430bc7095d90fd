"""The XmqCluster examples of docs/*.md are accepted by the API server (server-side dry run
against the CRD; tests/unit/docs/test_doc_examples.py parses every YAML example)."""

from __future__ import annotations

import copy
import json

import pytest

from scripts.k8s.cluster import ControlPlane
from tests.k8s.test_operator_crd import crd  # noqa: F401  (the fixture: the CRD applied)
from tests.support.doc_examples import YamlExample, xmqcluster_examples

EXAMPLES = xmqcluster_examples()


@pytest.mark.parametrize(
    ("example", "body"), EXAMPLES, ids=[example.where for example, _ in EXAMPLES]
)
def test_xmqcluster_examples_are_accepted_by_the_api_server(
    crd: ControlPlane,  # noqa: F811
    k8s_namespace: str,
    example: YamlExample,
    body: dict[str, object],
) -> None:
    manifest = copy.deepcopy(body)
    metadata = manifest["metadata"]
    assert isinstance(metadata, dict)
    metadata["namespace"] = k8s_namespace
    out = crd.kubectl(
        "apply", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(manifest)
    )
    assert json.loads(out.stdout)["kind"] == "XmqCluster", example.where
