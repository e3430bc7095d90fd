"""The configuration reference (``docs/configuration.md``), generated from the model.

``render_reference()`` walks ``BrokerConfig``: every key with its type, allowed values,
default, environment variable and description. ``xmq config-doc`` prints it, and a test
fails when the committed file differs. ``describe_errors`` turns a ``ValidationError`` into
lines naming the field and, for unknown keys, the keys that are allowed there.
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from xmq.config.model import BrokerConfig

_HEADER = """\
# Configuration reference

<!-- Generated from broker/xmq/config/model.py by `xmq config-doc`; do not edit by hand.
     tests/unit/config/test_reference_doc.py fails when this file is stale. -->

XMQ reads one YAML file (`xmq serve --config FILE`) plus environment variables. Every key
can also be set as `XMQ_<SECTION>__<KEY>` (for example `XMQ_MQTT__MAX_PACKET_SIZE=65536`);
the environment wins over the file. `listeners` is a list: set it in the file, or as JSON
in `XMQ_LISTENERS`. Unknown keys are refused, and `xmq check-config FILE` validates a file
without starting the broker: each error is one line naming the field and the values it
allows. It also checks what `xmq serve` needs: files readable, certificate and key a pair,
hosts and ports bindable, no two listeners on one port (see operations-broker.md).

Example:

```yaml
node_id: xmq-0
listeners:
  - {name: mqtt, protocol: tcp, port: 1884}
  - name: mqtts
    protocol: tls
    port: 8884
    tls: {cert_file: /etc/xmq/tls.crt, key_file: /etc/xmq/tls.key}
  - {name: ws, protocol: ws, port: 8083, ws_path: /mqtt}
limits:
  max_connections: 100000
metrics:
  port: 9090
shutdown:
  grace_s: 20
```
"""


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _unwrap(annotation: Any) -> tuple[Any, bool]:
    """(inner annotation, whether it is a list) for ``tuple[X, ...]`` and ``X | None``."""
    origin = get_origin(annotation)
    if origin in (tuple, list):
        return get_args(annotation)[0], True
    if origin in (Union, types.UnionType):
        non_none = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(non_none) == 1:
            return non_none[0], False
    return annotation, False


def _type_text(annotation: Any) -> str:
    origin = get_origin(annotation)
    if origin is Literal:
        return "one of " + ", ".join(f"`{value}`" for value in get_args(annotation))
    if origin in (Union, types.UnionType):
        parts = [_type_text(arg) for arg in get_args(annotation) if arg is not type(None)]
        return " or ".join(parts) + " or null"
    if origin in (tuple, list):
        return f"list of {_type_text(get_args(annotation)[0])}"
    if _is_model(annotation):
        return "section"
    names = {int: "integer", float: "number", bool: "boolean", str: "string", Path: "path"}
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return "one of " + ", ".join(f"`{member.value}`" for member in annotation)
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _bounds(field: FieldInfo) -> str:
    bounds = []
    for item in field.metadata:
        if isinstance(item, annotated_types.Ge):
            bounds.append(f">= {item.ge}")
        elif isinstance(item, annotated_types.Gt):
            bounds.append(f"> {item.gt}")
        elif isinstance(item, annotated_types.Le):
            bounds.append(f"<= {item.le}")
        elif isinstance(item, annotated_types.MinLen):
            bounds.append(f"length >= {item.min_length}")
    return ", ".join(bounds)


def _default_text(field: FieldInfo) -> str:
    if field.default is PydanticUndefined and field.default_factory is None:
        return "required"
    if field.default_factory is not None:
        return "see below" if _is_model(_unwrap(field.annotation)[0]) else "(computed)"
    value = field.default
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return "see below"
    return f"`{value}`"


def _rows(model: type[BaseModel], prefix: str, env: str | None) -> Iterator[list[str]]:
    for name, field in model.model_fields.items():
        inner, is_list = _unwrap(field.annotation)
        key = f"{prefix}{name}"
        if _is_model(inner):
            continue
        kind = _type_text(field.annotation)
        bounds = _bounds(field)
        if bounds:
            kind = f"{kind} ({bounds})"
        env_var = f"`{env}{name.upper()}`" if env is not None else "-"
        description = (field.description or "").replace("|", "\\|")
        yield [f"`{key}`", kind, _default_text(field), env_var, description]


def _sections(
    model: type[BaseModel], prefix: str, env: str | None, title: str
) -> Iterator[tuple[str, str, type[BaseModel], str | None]]:
    yield title, prefix, model, env
    for name, field in model.model_fields.items():
        inner, is_list = _unwrap(field.annotation)
        if not _is_model(inner):
            continue
        child_prefix = f"{prefix}{name}[]." if is_list else f"{prefix}{name}."
        child_env = None if is_list or env is None else f"{env}{name.upper()}__"
        child_title = f"{prefix}{name}" + ("[]" if is_list else "")
        yield from _sections(inner, child_prefix, child_env, child_title)


def render_reference() -> str:
    """The whole ``docs/configuration.md``."""
    out = [_HEADER]
    for title, prefix, model, env in _sections(BrokerConfig, "", "XMQ_", "top level"):
        rows = list(_rows(model, prefix, env))
        if not rows:
            continue
        doc = (model.__doc__ or "").strip().splitlines()[0] if model.__doc__ else ""
        out.append(f"\n## `{title}`\n" if title != "top level" else "\n## Top level\n")
        if doc and title != "top level":
            out.append(f"{doc}\n")
        out.append("| key | type | default | environment | description |")
        out.append("|---|---|---|---|---|")
        out.extend("| " + " | ".join(row) + " |" for row in rows)
    return "\n".join(out) + "\n"


def _model_at(loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The section model that holds the last key of an error location."""
    model: Any = BrokerConfig
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        if not _is_model(model) or part not in model.model_fields:
            return None
        model = _unwrap(model.model_fields[part].annotation)[0]
        if get_origin(model) in (tuple, list):
            model = get_args(model)[0]
    return model if _is_model(model) else None


def describe_errors(error: ValidationError) -> list[str]:
    """One line per problem, naming the field (``listeners.0.protocol``) and what it allows."""
    lines = []
    for item in error.errors():
        loc = tuple(part for part in item["loc"] if not _is_tagged_union_part(part))
        where = ".".join(str(part) for part in loc) or "(root)"
        message = item["msg"]
        if item["type"] == "extra_forbidden":
            model = _model_at(loc)
            if model is not None:
                message += "; allowed keys: " + ", ".join(model.model_fields)
        elif item["type"] not in ("missing",) and "input" in item:
            shown = item["input"]
            if not isinstance(shown, dict | list):
                message += f" (got {shown!r})"
        lines.append(f"{where}: {message}")
    return lines


def _is_tagged_union_part(part: int | str) -> bool:
    return isinstance(part, str) and part.startswith(("function-", "tagged-union["))
