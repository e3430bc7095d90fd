"""The stored form of a persistent session's subscription (``session:subs:<client id>``).

Field value: compact JSON ``{"f": filter, "q": QoS, "nl": No Local, "rap": Retain As
Published, "rh": Retain Handling, "id": subscription identifier or null, "g": share group or
null}``; the hash field is the subscription key (the filter, or ``$share/<group>/<filter>``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class StoredSubscription:
    topic_filter: str
    qos: int
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = 0
    identifier: int | None = None
    share_group: str | None = None


def encode_subscription(sub: StoredSubscription) -> str:
    return json.dumps(
        {
            "f": sub.topic_filter,
            "q": sub.qos,
            "nl": sub.no_local,
            "rap": sub.retain_as_published,
            "rh": sub.retain_handling,
            "id": sub.identifier,
            "g": sub.share_group,
        },
        separators=(",", ":"),
    )


def decode_subscription(raw: str | bytes) -> StoredSubscription:
    """Parse a stored subscription; raises ``ValueError`` on a malformed one."""
    data: dict[str, Any] = json.loads(raw)
    identifier = data.get("id")
    group = data.get("g")
    return StoredSubscription(
        str(data["f"]),
        int(data["q"]),
        bool(data.get("nl", False)),
        bool(data.get("rap", False)),
        int(data.get("rh", 0)),
        int(identifier) if identifier is not None else None,
        str(group) if group is not None else None,
    )
