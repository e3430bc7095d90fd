"""Status conditions: ``lastTransitionTime`` moves only when a condition's status flips."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

Status = Literal["True", "False", "Unknown"]

READY = "Ready"
PROGRESSING = "Progressing"
DEGRADED = "Degraded"
PAUSED = "ReconciliationPaused"
ORDER = (READY, PROGRESSING, DEGRADED, PAUSED)


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: Status
    reason: str
    message: str = ""
    observed_generation: int | None = None
    """The generation this condition describes (None: the one passed to the merge)."""


def merge_conditions(
    previous: Sequence[dict[str, Any]] | None,
    desired: Sequence[Condition],
    generation: int,
    now: datetime,
) -> list[dict[str, Any]]:
    """The new ``status.conditions`` list.

    Conditions not in ``desired`` are kept as they were (except none is ever dropped
    silently: the caller lists each type it owns). ``lastTransitionTime`` is copied from the
    previous entry unless the status changed.
    """
    old = {item.get("type"): item for item in previous or [] if isinstance(item, dict)}
    merged: dict[str, dict[str, Any]] = {}
    for condition in desired:
        before = old.get(condition.type)
        transition = rfc3339(now)
        if before is not None and before.get("status") == condition.status:
            transition = before.get("lastTransitionTime") or transition
        merged[condition.type] = {
            "type": condition.type,
            "status": condition.status,
            "observedGeneration": (
                generation
                if condition.observed_generation is None
                else condition.observed_generation
            ),
            "reason": condition.reason,
            "message": condition.message,
            "lastTransitionTime": transition,
        }
    for kind, item in old.items():
        if isinstance(kind, str) and kind not in merged:
            merged[kind] = dict(item)
    return sorted(
        merged.values(),
        key=lambda item: (ORDER.index(item["type"]) if item["type"] in ORDER else 99, item["type"]),
    )


def condition_status(conditions: Sequence[dict[str, Any]] | None, kind: str) -> str | None:
    """The status of condition ``kind``, if present."""
    for item in conditions or []:
        if item.get("type") == kind:
            status = item.get("status")
            return status if isinstance(status, str) else None
    return None
