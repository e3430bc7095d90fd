"""Which child events mean drift: a child deleted, or its spec edited by someone else."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any


def controller_owner(child: Mapping[str, Any], api_version: str, kind: str) -> str | None:
    """Name of the controlling owner of ``child`` when it is a ``kind``, else None."""
    for ref in child.get("metadata", {}).get("ownerReferences") or []:
        if (
            ref.get("controller")
            and ref.get("apiVersion") == api_version
            and ref.get("kind") == kind
        ):
            name = ref.get("name")
            return str(name) if name else None
    return None


class ChildWatch:
    """Remembers each child's generation, so status-only updates are not taken for drift.

    Objects with a ``metadata.generation`` (StatefulSet, PodDisruptionBudget) drifted when it
    moved since last seen; others (Service, ConfigMap) on any modification. A deletion always
    counts. The first sight of an object (the watch's initial listing) does not.
    """

    def __init__(self) -> None:
        self._generations: dict[str, int] = {}
        self._lock = threading.Lock()

    def drifted(self, event_type: str, child: Mapping[str, Any]) -> bool:
        metadata = child.get("metadata", {})
        uid = str(metadata.get("uid", ""))
        with self._lock:
            if event_type == "DELETED":
                self._generations.pop(uid, None)
                return True
            generation = metadata.get("generation")
            if generation is None:
                return event_type == "MODIFIED"
            before = self._generations.get(uid)
            self._generations[uid] = int(generation)
            return before is not None and before != int(generation)
