"""Which build of the hot modules runs: mypyc-compiled extensions or the pure-Python source.

``scripts/build-native`` compiles the modules in ``NATIVE_MODULES`` with mypyc into extension
modules next to their ``.py`` files (``xmq/codec/wire.cpython-311-x86_64-linux-gnu.so``, plus
the group's shared library ``xmq/native__mypyc...so``) and writes ``native-build.json``: the
size, mtime and SHA-256 of every ``.py`` of the package when it compiled. Python's path finder
prefers an extension module to a ``.py`` of the same name, so the compiled modules load by
default. They do not when:

- ``XMQ_PURE=1`` is set (the escape hatch, and the second unit-test run);
- there is no stamp (no compiler, ``XMQ_PURE=1`` at build time, a failed build);
- any source differs from the one compiled (an edit after the build: running stale
  compiled code would test something else than the source).

Then ``_SourceOnlyFinder`` (first on ``sys.meta_path``) loads every module of
``NATIVE_MODULES`` from its ``.py``. It is all or nothing: compiled modules of one group
call each other directly, so a mix would still run stale code. ``xmq/__init__`` imports this
module before anything else in the package.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import json
import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType
from typing import Literal

Build = Literal["compiled", "pure"]

NATIVE_MODULES: tuple[str, ...] = (
    "xmq.codec.packet_decoder",
    "xmq.codec.connect_decoder",
    "xmq.codec.plain_publish",
    "xmq.codec.properties",
    "xmq.codec.property_codec",
    "xmq.codec.puback_batch",
    "xmq.codec.reader",
    "xmq.codec.reason_codes",
    "xmq.codec.wire",
    "xmq.codec.writer",
    "xmq.core.delivery_queue",
    "xmq.core.inflight_window",
    "xmq.core.owed_writes",
    "xmq.routing.filter_trie",
    "xmq.routing.retained",
    "xmq.routing.shared_tree",
    "xmq.routing.subscription_tree",
    "xmq.routing.topics",
    "xmq.core.deadline_wheel",
    "xmq.protocol.connect_terms",
    "xmq.protocol.outbound_qos",
    "xmq.protocol.packet_ids",
    "xmq.protocol.topic_aliases",
    "xmq.cluster.link_frames",
    "xmq.net.client_protocol",
    "xmq.net.client_output",
    "xmq.net.admission",
    "xmq.net.publish_throttle",
    "xmq.core.session",
    "xmq.core.session_queue",
    "xmq.core.subscription",
    "xmq.core.message",
    "xmq.store.redis_batcher",
    "xmq.store.batch_entries",
    "xmq.store.batcher_link",
    "xmq.store.fenced_calls",
    "xmq.store.session_records",
    "xmq.store.redis_session_store",
    "xmq.contract.message_record",
    "xmq.core.held_acks",
    "xmq.cluster.peer_link",
    "xmq.cluster.link_pacing",
    "xmq.cluster.link_ledger",
    "xmq.cluster.link_backpressure",
    "xmq.cluster.link_dispatch",
    "xmq.store.resp_connection",
    "xmq.core.stats",
    "xmq.core.publish_flow",
    "xmq.core.connection",
    "xmq.core.connected_packets",
    "xmq.core.login_input",
    "xmq.core.broker",
    "xmq.core.session_lifecycle",
    "xmq.core.node_caps",
    "xmq.core.shared_delivery",
    "xmq.core.login_flow",
    "xmq.core.connack_encoding",
    "xmq.core.inline_auth",
    "xmq.core.lease_fence",
    "xmq.core.session_client",
    "xmq.cluster.cluster_hub",
    "xmq.cluster.link_hello",
    "xmq.cluster.link_loss",
    "xmq.core.durable_context",
    "xmq.store.redis_stats",
    "xmq.cluster.route_table",
    "xmq.codec.connect_packet",
    "xmq.core.auth_records",
    "xmq.net.listeners",
    "xmq.core.session_access",
    "xmq.core.client_link",
    "xmq.core.turn_flush",
    "xmq.codec.byte_values",
    "xmq.core.node_identity",
)
"""The compiled modules (docs/architecture.md, "Compiled hot modules", says why these)."""

GROUP = "xmq.native"
"""mypyc group name: its shared library is the module ``xmq.native__mypyc``."""

PACKAGE_DIR = Path(__file__).resolve().parent
STAMP = PACKAGE_DIR / "native-build.json"
PURE_ENV = "XMQ_PURE"


def source_files(package_dir: Path = PACKAGE_DIR) -> list[Path]:
    """Every ``.py`` of the package: compiled code inlines constants and types of imports."""
    return sorted(package_dir.rglob("*.py"))


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def source_record(package_dir: Path = PACKAGE_DIR) -> dict[str, list[int | str]]:
    """``relative path -> [size, mtime_ns, sha256]`` of every source (the build's stamp)."""
    record: dict[str, list[int | str]] = {}
    for path in source_files(package_dir):
        stat = path.stat()
        rel = path.relative_to(package_dir).as_posix()
        record[rel] = [stat.st_size, stat.st_mtime_ns, _digest(path)]
    return record


def stamp_problem(package_dir: Path = PACKAGE_DIR) -> str | None:
    """Why the compiled modules must not load (``None``: they match the source)."""
    stamp = package_dir / STAMP.name
    try:
        built = json.loads(stamp.read_text())
    except FileNotFoundError:
        return "not built"
    except (OSError, ValueError) as exc:
        return f"unreadable {stamp.name}: {exc}"
    if built.get("python") != sys.implementation.cache_tag:
        return f"built for {built.get('python')}, running {sys.implementation.cache_tag}"
    recorded: dict[str, list[int | str]] = built.get("sources", {})
    current = {path.relative_to(package_dir).as_posix(): path for path in source_files(package_dir)}
    if set(recorded) != set(current):
        return "source files added or removed since the build"
    for rel, path in current.items():
        size, mtime_ns, digest = recorded[rel]
        stat = path.stat()
        if (stat.st_size, stat.st_mtime_ns) != (size, mtime_ns) and _digest(path) != digest:
            return f"{rel} changed since the build"
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    for name in NATIVE_MODULES:
        rel = name.removeprefix("xmq.").replace(".", "/")
        if not (package_dir / f"{rel}{suffix}").exists():
            return f"{rel}{suffix} missing"
    return None


class _SourceOnlyFinder:
    """Finds the modules of ``NATIVE_MODULES`` as ``.py`` source only (extensions ignored)."""

    def __init__(self) -> None:
        self._finders: dict[str, importlib.machinery.FileFinder] = {}

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname not in _NATIVE or path is None:
            return None
        for entry in path:
            finder = self._finders.get(entry)
            if finder is None:
                finder = importlib.machinery.FileFinder(
                    entry,
                    (importlib.machinery.SourceFileLoader, importlib.machinery.SOURCE_SUFFIXES),
                )
                self._finders[entry] = finder
            spec = finder.find_spec(fullname)
            if spec is not None:
                return spec
        return None


_NATIVE = frozenset(NATIVE_MODULES)


def _choose() -> tuple[Build, str]:
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        return "pure", f"{PURE_ENV}={os.environ[PURE_ENV]}"
    problem = stamp_problem()
    if problem is None:
        return "compiled", "mypyc"
    return "pure", problem


BUILD, BUILD_REASON = _choose()
"""``compiled`` or ``pure``, and why (shown by ``xmq --version``)."""

if BUILD == "pure":
    sys.meta_path.insert(0, _SourceOnlyFinder())


def loaded_build() -> dict[str, Build]:
    """Module name -> the build actually imported (for the test that checks ``BUILD``)."""
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    loaded: dict[str, Build] = {}
    for name in NATIVE_MODULES:
        module = __import__(name, fromlist=["_"])
        origin = module.__spec__.origin if module.__spec__ is not None else None
        loaded[name] = "compiled" if origin and origin.endswith(suffixes) else "pure"
    return loaded
