"""Ports between the broker core and the cluster / durable-session adapters.

The core never imports Redis or sockets: ``xmq.cluster`` (membership, node links, routes) and
``xmq.store`` (session ownership and durable sessions in Redis) implement these protocols and
``xmq.app`` wires them in. With no cluster configured every port is ``None`` and the hot path
pays one attribute check.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

# the port names them; compiled with their readers (core.durable_context, core.node_identity)
from xmq.core.durable_context import NO_DURABLE_CONTEXT as NO_DURABLE_CONTEXT
from xmq.core.durable_context import DurableContext as DurableContext
from xmq.core.node_identity import NodeIdentity as NodeIdentity
from xmq.core.node_identity import RunIds as RunIds

if TYPE_CHECKING:
    from xmq.core.message import Message
    from xmq.core.session import Delivery, Session, Subscription


class ClusterUnavailableError(Exception):
    """The cluster cannot serve a CONNECT now (node offline, Redis unreachable): 0x88."""


class ForeignSessionError(Exception):
    """The client id's session belongs to another identity (user): never inherited."""


class ClaimOutcome(enum.IntEnum):
    CLAIMED = 0
    RESTORED = 1
    OWNED_ELSEWHERE = 2
    FOREIGN = 3
    """Another identity holds the session (alive or stored); nothing was changed."""


@dataclass(frozen=True, slots=True)
class SubscriptionSpec:
    """A stored subscription of a persistent session."""

    key: str
    topic_filter: str
    qos: int
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = 0
    identifier: int | None = None
    share_group: str | None = None


@dataclass(slots=True)
class RestoredSession:
    """A persistent session read back from the store (deliveries already decoded)."""

    subscriptions: list[SubscriptionSpec] = field(default_factory=list)
    queued: list[Delivery] = field(default_factory=list)
    inflight: dict[int, Delivery] = field(default_factory=dict)
    inbound_qos2: set[int] = field(default_factory=set)
    incarnation: str = ""
    """What the session's inbound QoS 2 message ids start with (``core.inbound_ids``; ``''``:
    none, a session that is not durable)."""
    inbound_generations: dict[int, int] = field(default_factory=dict)
    """Inbound QoS 2 packet id -> times the session released it."""
    stored: bool = True
    """False: nothing was stored (a durable session starting now); only its incarnation."""


@dataclass(frozen=True, slots=True)
class ClaimResult:
    outcome: ClaimOutcome
    owner: tuple[str, int] = ("", 0)
    restored: RestoredSession | None = None
    incarnation: str = ""
    """A claimed durable session's incarnation (``core.inbound_ids``): the stored one, or the
    one it started with now."""


class SessionDirectory(Protocol):
    """Cluster-wide client id ownership (one Redis round trip per claim, batched)."""

    async def claim(
        self,
        client_id: str,
        *,
        clean_start: bool,
        durable: bool,
        want_state: bool,
        protocol_version: int,
        expiry_interval: int,
        expected: tuple[str, int] | None = None,
        identity: str = "",
        refuse_foreign: bool = True,
    ) -> ClaimResult:
        """Claim ``client_id`` for this node; raises :class:`ClusterUnavailableError`.

        ``identity`` (who connects) is recorded with the session; a session of another
        identity is refused (``FOREIGN``), or started clean when ``refuse_foreign`` is False.
        """
        ...

    def release(self, client_id: str) -> None:
        """The session ended here: drop its owner record (when still ours) and stored state."""


class DurableHold(Protocol):
    """Something that waits for durable records: a publisher's held PUBACK / PUBREC
    (``core.held_acks.HeldAck``). Each record it waits for takes one ``hold()`` and gives it
    back with ``release()`` once it is written (or once it no longer needs to be waited for).
    """

    def hold(self) -> None: ...

    def release(self) -> None: ...

    def fail(self) -> None:
        """A record it waited for could not be written (given up after retries): the
        acknowledgement must not report success."""

    def undelivered(self, reason: int) -> None:
        """Like ``release``, for a delivery the routing counted (a frame to another node)
        that was delivered nowhere there, for ``reason`` (0x97: dropped for a quota): when
        no delivery is left, the acknowledgement carries that reason."""


Direct = tuple["Message", int, bool, tuple[int, ...]]
"""A message for one session (DIRECT): message, delivery QoS, retain flag, subscription ids."""


class DurableStore(Protocol):
    """Durable records of persistent sessions (group-committed once per loop tick)."""

    ids_first: bool
    """True (``max_queued_writes`` 0) when a QoS 2 record's PUBLISH and PUBREL wait until the
    store has answered the write of its packet id / PUBREC state (``core.owed_writes``)."""

    @property
    def unwritten(self) -> int:
        """Records made and not yet answered by the store (each holds its delivery, its
        write and its callback meanwhile: ``core.fanout_slices`` routes no slice while it is
        over ``RECORDS_AHEAD``)."""
        ...

    def record(
        self, session: Session, delivery: Delivery, now: float, context: DurableContext
    ) -> bool:
        """Record a QoS 1/2 delivery, then hand it to ``session.deliver_recorded``.

        ``context.hold`` (when set) is held until the record is written (failed when it is
        given up); ``context.forward_id`` (when set, for a non-shared delivery) is the
        record's id, and a session that has a record of it already (from this node, or
        queued by any node while its marker lives) gets none: it counts as delivered but is
        neither queued nor sent again. A shared delivery of an inbound QoS 2 message (its
        ``Message.forward_id``, ``core.shared_claims``) is recorded only when its group has
        no record or claim of it yet (else its ``on_done`` runs, and nothing is queued).
        """
        ...

    def claim_shared(
        self,
        share: Subscription,
        message_id: str,
        hold: DurableHold | None,
        claimed: Callable[[bool], None],
    ) -> None:
        """Claim ``share``'s group for the inbound QoS 2 message ``message_id`` before a member
        without a record of it has it (``core.shared_claims``): ``claimed(True)`` once the
        claim is written, ``claimed(False)`` when the group has the message already (a
        member's record or claim of it); neither when the write is given up (``hold``, held
        meanwhile, then fails)."""

    def sent(self, session: Session, delivery: Delivery) -> None:
        """A recorded delivery is in flight under ``delivery.packet_id``; when its PUBLISH
        waits for that (``delivery.owed``), ``session.state_recorded`` once it is written."""

    def released(self, session: Session, delivery: Delivery) -> None:
        """PUBREC received for a recorded QoS 2 delivery (``session.state_recorded`` the same
        way when its PUBREL waits)."""

    def acknowledged(self, session: Session, delivery: Delivery) -> None:
        """The delivery is complete: its record is deleted."""

    def restored(self, session: Session, deliveries: Iterable[Delivery]) -> None:
        """A claim read these records of ``session`` back from the store. One recorded under
        a forward id counts as recorded here, as if ``record`` had made it: the same message
        reaching the session here afterwards by another path (a PUBLISH frame of a third
        node, after the old owner handed it on into the session's queue before the claim)
        is neither recorded nor delivered again."""

    def inbound_changed(
        self,
        session: Session,
        packet_id: int,
        added: bool,
        hold: DurableHold | None,
        generation: int | None = None,
    ) -> None:
        """An inbound QoS 2 packet id was received (added) or released; ``hold`` (the
        PUBREC / PUBCOMP waiting for it), when set, is held until the change is written.
        ``generation``: a released id's release count before this release
        (``core.inbound_ids``; ``None``: the session has no inbound message ids)."""

    def subscribed(
        self,
        session: Session,
        key: str,
        sub: Subscription | None,
        hold: DurableHold | None = None,
    ) -> None:
        """A subscription was added or replaced (``sub``) or removed (``None``); ``hold`` (the
        SUBACK waiting for it), when set, is held until the record is written."""

    def disconnected(self, session: Session) -> None:
        """The session's client went away (the session lives on)."""

    async def flush(self) -> None:
        """Wait until every record queued so far is written."""

    def written(self) -> bool:
        """True when every write queued so far is answered, but removals nobody waits for (an
        acknowledged record's, which may come later: a node killed first sends the message
        again); when True, ``flush`` has no record to wait for."""

    def append_if_owner(
        self,
        client_id: str,
        owner: tuple[str, int],
        message: Message,
        qos: int,
        retain: bool,
        on_moved: Callable[[str, int], None],
        hold: DurableHold | None = None,
    ) -> None:
        """Queue a message in Redis for a session whose owner is gone (while it still owns it).

        When another node owns the session by then, ``on_moved(node id, epoch)`` is called.
        ``hold`` is held until Redis has answered (and ``on_moved`` has run). A message with a
        ``forward_id`` (it crossed a node link) is appended under that record id, and not at
        all when the session's marker of it exists (a node recorded it for the session
        already).
        """


class ClusterRouter(Protocol):
    """Routes to other nodes over the node links."""

    def forward(self, message: Message, hold: DurableHold | None = None) -> int:
        """Send a locally published message to every other node with a matching route.

        ``hold`` (a publisher's held acknowledgement) is held until every node with
        persistent sessions the message went to has it in its records, and every append
        for a dead owner's session is in Redis.
        """
        ...

    def may_hold(self) -> bool:
        """Whether ``forward`` may take a hold now, for a message that is not retained (False:
        nothing it would send is kept until another node or Redis has it)."""
        ...

    def forward_shared(
        self, group: str, topic_filter: str, message: Message, hold: DurableHold | None = None
    ) -> bool:
        """Send a message to one other node with members of the shared group.

        ``hold`` is held until that node has taken the message: its member's record written
        (a persistent session) or the message handed to the member; when the link dies first,
        until the member it is re-dispatched to has taken it.
        """
        ...

    def has_shared(self, group: str, topic_filter: str) -> bool:
        """True when another node has members of the shared group."""
        ...

    def subscription_changed(self, session: Session, sub: Subscription, added: bool) -> None:
        """A local subscription was added or removed (route deltas to the other nodes)."""

    def session_gone(self, session: Session, durable: bool) -> None:
        """A session left this node: ended, or (persistent, ``durable``) handed over.

        Other nodes treat a handed-over persistent session's subscriptions as orphans until
        its new owner announces them, so nothing published in between is lost.
        """

    async def request_takeover(
        self, owner: tuple[str, int], client_id: str, ends_session: bool = False
    ) -> bool:
        """Ask a live owner to close the client (0x8E) and hand the session over;
        ``ends_session``: the new connection starts clean, so the session ends there (its
        delayed will, if one is pending, is published, as when a session ends on one node)."""
        ...


class RetainedSync(Protocol):
    """Cluster-wide retained messages: every retained change published on this node goes to
    Redis (batched per loop tick) so that nodes starting later load it."""

    def changed(self, message: Message, hold: DurableHold | None = None) -> None:
        """A retained PUBLISH (set, or clear with an empty payload) was published here;
        ``hold`` (a publisher's held ack) is held until Redis has answered its write."""
