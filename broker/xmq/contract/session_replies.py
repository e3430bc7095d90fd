"""What the session scripts answer (``xmq.contract.session_scripts``), decoded.

The scripts and the calls that run them live in ``session_scripts``; their replies' outcomes
and the stored session a claim reads back are here.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class AppendOutcome(enum.IntEnum):
    """First element of :data:`~xmq.contract.session_scripts.APPEND_IF_OWNER`'s reply."""

    APPENDED = 0
    MOVED = 1
    """Another owner (or none: node ``''``) holds the session; nothing appended."""
    ALREADY_QUEUED = 2
    """The forwarded record's ``session:seen`` marker exists: nothing appended."""
    WRITER_FENCED = 3
    """The appending node's run holds no lease (it is going offline): nothing appended."""


class ClaimOutcome(enum.IntEnum):
    """First element of :data:`~xmq.contract.session_scripts.CLAIM_SESSION`'s reply."""

    CLAIMED = 0
    """The claim is ours; no stored session was asked for or none exists."""
    RESTORED = 1
    """The claim is ours and the reply carries the stored persistent session."""
    OWNED_ELSEWHERE = 2
    """A live node owns the session: ask it to hand over, then claim with ``expected``."""
    FOREIGN = 3
    """Another identity holds the session (alive or stored): nothing was changed."""
    FENCED = 4
    """The claiming run holds no lease (its epoch is not current): nothing was changed."""


class ReleaseOutcome(enum.IntEnum):
    """Reply of :data:`~xmq.contract.session_scripts.RELEASE_SESSION`."""

    NOT_OURS = 0
    """No owner record, or another run's: nothing deleted."""
    RELEASED = 1
    FENCED = 2
    """The releasing run holds no lease (its epoch is not current): nothing deleted."""


@dataclass(frozen=True, slots=True)
class StoredSession:
    """A persistent session as :data:`~xmq.contract.session_scripts.CLAIM_SESSION` returns it."""

    subscriptions: dict[str, bytes] = field(default_factory=dict)
    queue: list[bytes] = field(default_factory=list)
    inflight: dict[str, bytes] = field(default_factory=dict)
    inbound_qos2: list[int] = field(default_factory=list)
    incarnation: str = ""
    """The session's incarnation (``''``: stored by a node of the version before it)."""
    inbound_generations: dict[int, int] = field(default_factory=dict)
    """Inbound QoS 2 packet id -> times released (only ids released at least once)."""


@dataclass(frozen=True, slots=True)
class ClaimReply:
    """Decoded reply of :data:`~xmq.contract.session_scripts.CLAIM_SESSION`."""

    outcome: ClaimOutcome
    owner_node: str = ""
    owner_epoch: int = 0
    owner_address: str = ""
    stored: StoredSession | None = None

    @classmethod
    def from_reply(cls, reply: object) -> ClaimReply:
        if not isinstance(reply, list) or not reply:
            raise ValueError(f"unexpected claim reply {reply!r}")
        outcome = ClaimOutcome(int(reply[0]))
        if outcome in (ClaimOutcome.CLAIMED, ClaimOutcome.FOREIGN, ClaimOutcome.FENCED):
            return cls(outcome)
        node, epoch, address = _text(reply[1]), int(reply[2]), _text(reply[3])
        if outcome == ClaimOutcome.OWNED_ELSEWHERE:
            return cls(outcome, node, epoch, address)
        subs, queue, inflight, qos2 = reply[4], reply[5], reply[6], reply[7]
        generations = reply[9] if len(reply) > 9 else []
        stored = StoredSession(
            {_text(k): _raw(v) for k, v in zip(subs[::2], subs[1::2], strict=True)},
            [_raw(item) for item in queue],
            {_text(k): _raw(v) for k, v in zip(inflight[::2], inflight[1::2], strict=True)},
            sorted(int(item) for item in qos2),
            _text(reply[8]) if len(reply) > 8 else "",
            {int(k): int(v) for k, v in zip(generations[::2], generations[1::2], strict=True)},
        )
        return cls(outcome, node, epoch, address, stored)


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode()
    return str(value)


def _raw(value: object) -> bytes:
    if isinstance(value, bytes):
        return value
    return str(value).encode()
