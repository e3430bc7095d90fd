"""Every YAML example in docs/*.md parses; XmqCluster examples are valid specs whose broker
config the operator accepts (tests/k8s/test_doc_examples.py applies them to the API server)."""

from __future__ import annotations

import pytest

from tests.support.doc_examples import YamlExample, xmqcluster_examples, yaml_examples
from xmq_operator.broker_config import build_broker_config, validate_broker_config
from xmq_operator.spec import ClusterSpec

EXAMPLES = yaml_examples()


def test_the_docs_have_yaml_examples_including_an_xmqcluster() -> None:
    assert len(EXAMPLES) >= 4
    assert xmqcluster_examples()


@pytest.mark.parametrize("example", EXAMPLES, ids=[example.where for example in EXAMPLES])
def test_every_yaml_example_parses(example: YamlExample) -> None:
    assert example.documents(), f"{example.where}: empty"


@pytest.mark.parametrize(
    ("example", "body"),
    xmqcluster_examples(),
    ids=[example.where for example, _ in xmqcluster_examples()],
)
def test_xmqcluster_examples_are_valid_for_the_operator(
    example: YamlExample, body: dict[str, object]
) -> None:
    spec = ClusterSpec.model_validate(body["spec"])
    validate_broker_config(build_broker_config(spec, "mq.xmq"))
