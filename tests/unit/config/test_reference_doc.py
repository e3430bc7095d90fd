"""docs/configuration.md is generated from the model and must not go stale."""

from __future__ import annotations

from pathlib import Path

from xmq.config import BrokerConfig
from xmq.config.reference_doc import render_reference

DOC = Path(__file__).resolve().parents[3] / "docs" / "configuration.md"


def test_committed_reference_matches_the_model() -> None:
    assert DOC.read_text(encoding="utf-8") == render_reference(), (
        "docs/configuration.md is stale: run `xmq config-doc -o docs/configuration.md`"
    )


def test_every_key_is_documented() -> None:
    text = render_reference()
    for section_name, field in BrokerConfig.model_fields.items():
        annotation = field.annotation
        model = getattr(annotation, "model_fields", None)
        if model is None:
            continue
        for key in model:
            assert f"`{section_name}.{key}`" in text, f"{section_name}.{key} undocumented"
    for key in ("listeners[].proxy_protocol", "listeners[].tls.cert_file", "shutdown.grace_s"):
        assert f"`{key}`" in text
    assert "`XMQ_MQTT__MAX_PACKET_SIZE`" in text
    assert "one of `tcp`, `tls`, `ws`, `wss`" in text
