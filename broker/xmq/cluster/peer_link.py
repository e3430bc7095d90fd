"""One TCP link to another node: frames in, frames out batched once per loop tick.

Inbound, a read's frames are handled in order, a loop turn's worth at a time
(``link_pacing``); outbound, a congested link pauses its publishers (``link_backpressure``);
what a link keeps until its peer confirms it, and a resumed link inherits: ``link_ledger``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from xmq.cluster import link_dispatch, link_ledger, link_pacing
from xmq.cluster.link_backpressure import ROOM_MEASURED, WRITE_HIGH, WRITE_LOW, pause_publisher
from xmq.cluster.link_frames import FrameDecoder, FrameError, hello, shared_ack
from xmq.cluster.link_ledger import Unconfirmed

if TYPE_CHECKING:
    from xmq.cluster.cluster_hub import ClusterHub
    from xmq.cluster.route_table import AnnouncedRoutes
    from xmq.core.cluster_ports import DurableHold
    from xmq.core.fanout_slices import Fanout
    from xmq.core.message import Message
    from xmq.core.ports import SessionClient


log = logging.getLogger("xmq.cluster.link")


class PeerLink(asyncio.Protocol):
    """A node link; the hub learns the peer's node id and epoch from its HELLO."""

    __slots__ = (
        "_ack_scheduled",
        "_behind",
        "_decoder",
        "_fanning_in",
        "_fence",
        "_flush_now",
        "_held",
        "_loop",
        "_out",
        "_out_room",
        "_paused_publishers",
        "_reading",
        "_scheduled",
        "_turn",
        "closed",
        "hub",
        "peer_epoch",
        "peer_node",
        "ack_due",
        "ack_pending",
        "announced",
        "heartbeat",
        "last_heard",
        "_resuming",
        "resumable",
        "published_in",
        "published_out",
        "received_shared",
        "retained_written",
        "shared_counted",
        "shared_out",
        "shared_seq",
        "snapshot_end",
        "transport",
        "unconfirmed",
        "unkept_publish",
        "undelivered",
        "writing_paused",
    )

    def __init__(self, hub: ClusterHub) -> None:
        self.hub = hub
        self.transport: asyncio.Transport | None = None
        self.peer_node = ""
        self.peer_epoch = 0
        self.closed = False
        self._decoder = FrameDecoder()
        self._fence = hub.broker.fence
        self._held: list[bytes] = []
        self._out: list[bytes] = []
        self._scheduled = False
        # this turn's frames are written by the process's one per-turn flush (with the
        # clients' output: one scheduled callback a turn for both), by a method bound once
        self._turn = hub.broker.turn_flush
        self._flush_now: Callable[[], None] = self._flush
        # local publishers paused while the write buffer is above WRITE_HIGH (None: it is not)
        self._paused_publishers: set[SessionClient] | None = None
        self.writing_paused = False  # the transport called pause_writing (not resumed yet)
        # bytes the frames of this turn (``_out``) may take before the buffer passes WRITE_HIGH
        # (at most: what was written since it was last measured counts as still buffered)
        self._out_room = WRITE_HIGH
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop it runs in (call_soon)
        # shared-group messages sent and not yet confirmed: re-dispatched if the link dies
        self.shared_seq = 0
        self.shared_counted = False  # both ends count SHARED frames for PUBLISH_ACK (HELLO)
        self.shared_out: dict[int, tuple[str, str, Any]] = {}
        self.received_shared: list[int] = []
        # PUBLISH and DIRECT frames: sent (count), and those for a node with persistent
        # sessions (every DIRECT) kept until it confirms they are in its records, with the
        # publisher's held ack; received (count) for our confirmations
        self.published_out = 0
        self.unconfirmed: deque[Unconfirmed] = deque()
        self.published_in = 0
        # (frame number, reason) of received frames delivered nowhere for a quota: told to
        # the sender with the PUBLISH_ACK that covers them (its held acks then say 0x97)
        self.undelivered: list[tuple[int, int]] = []
        self.ack_pending = False  # a PUBLISH_ACK is owed: its confirmation is due or running
        self.ack_due = False  # ... and has not started yet
        self._reading = False
        self._ack_scheduled = False
        # frames waiting behind a fan-out from this link (None: none in progress)
        self._behind: list[tuple[int, bytes]] | None = None
        # the PUBLISH frame (its number) fanning out here over later loop turns: handled
        # (in ``published_in``), confirmed after its last slice (``fanned_in``)
        self._fanning_in: tuple[int, Fanout] | None = None
        # FEATURE_RESUME on both ends: counted frames are kept (not written) while ``resuming``
        # (from HELLO until the peer's RESUME says where to start, and while the link is down)
        self.resumable = False
        self._resuming = False  # (``resuming``: the hub counts its links' changes)
        self.heartbeat = False  # FEATURE_HEARTBEAT on both ends: PING each second
        self.snapshot_end = False  # FEATURE_SNAPSHOT_END on both ends: snapshots end with it
        self.retained_written = False  # FEATURE_RETAINED_WRITTEN on both ends
        # FEATURE_UNKEPT_PUBLISH from the peer: PUBLISH frames not kept go as PUBLISH_UNKEPT
        # (it owes no PUBLISH_ACK for them: ``wants_ack``)
        self.unkept_publish = False
        # A resumed link: what the peer's snapshot names, until its SNAPSHOT_END
        self.announced: AnnouncedRoutes | None = None
        self.last_heard = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.transport.set_write_buffer_limits(WRITE_HIGH, WRITE_LOW)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        identity = self.hub.identity
        self.send(hello(identity.node_id, identity.epoch))

    def data_received(self, data: bytes) -> None:
        fence = self._fence
        now = self.hub.broker.now()
        if now >= fence.deadline:  # the lease is not proven: hold the frames
            if not self._held:
                fence.hold(self._release_held)
                if self.transport is not None and not self.closed:
                    self.transport.pause_reading()  # the rest waits in the kernel's buffers
            self._held.append(data)
            return
        self.last_heard = now
        self._handle_read(data, now)

    def _handle_read(self, data: bytes | None, now: float) -> None:
        """``_read`` within a read callback of the process's per-turn flush: the clients it
        writes to (its PUBLISH frames' local deliveries) are written at its end, as at the end
        of a client's read, not by a callback scheduled for the turn (``core.turn_flush``)."""
        turn = self._turn
        outer = turn.begin_read()
        try:
            self._read(data)
        finally:
            if outer:
                turn.end_read(now)

    def _read(self, data: bytes | None) -> None:
        """Decode ``data`` and handle its frames (None: the frames that waited behind a
        fan-out); their confirmation starts once they are handled."""
        self._reading = True
        try:
            if data is None:
                frames, self._behind = self._behind or [], None
            else:
                frames = self._decoder.feed(data)
                if self._behind is not None:  # (held by the fence meanwhile) after the others
                    self._behind.extend(frames)
                    return
            link_pacing.handle(self, frames)
        except (FrameError, UnicodeDecodeError, ValueError) as error:
            log.warning("link %s: %s", self.peer_node or "?", error)
            self.close()
        finally:
            self._reading = False
        if self.ack_due:
            link_dispatch.confirm(self.hub, self)
        if self._out:  # the frames the read caused on this link (its PUBLISH_ACK): now
            self._flush()

    def defer(self, frames: list[tuple[int, bytes]], delay: float) -> None:
        """The rest of a read waits, in order and with reading paused, for a later turn."""
        self._wait_for_fanout()
        assert self._behind is not None
        self._behind.extend(frames)
        loop = self.hub.broker.loop
        if delay:
            loop.call_later(delay, self._resume)
        else:
            loop.call_soon(self._resume)

    def queue_behind(self, frames: list[tuple[int, bytes]]) -> None:
        """Frames read after one that started a fan-out: they wait behind it, in order."""
        assert self._behind is not None
        self._behind.extend(frames)

    def fan_in(self, fanout: Fanout) -> None:
        """The PUBLISH frame being handled fans out over later loop turns: it is handled (a
        RESUME counts it), confirmed after its last slice (``fanned_in``); the link's later
        frames wait, reading paused, until then."""
        self.published_in += 1
        self._fanning_in = (self.published_in, fanout)
        self._wait_for_fanout()

    def _wait_for_fanout(self) -> None:
        self._behind = []
        if self.transport is not None and not self.closed:
            self.transport.pause_reading()

    def fanned_in(self, fanout: Fanout) -> int:
        """The last slice of ``fanout`` is routed: the number of its frame, confirmable now
        (0: the link does not hold it — it was given up); the frames behind it go on next
        turn."""
        fanning = self._fanning_in
        if fanning is None or fanning[1] is not fanout:
            return 0
        self._fanning_in = None
        self.hub.broker.loop.call_soon(self._resume)
        return fanning[0]

    @property
    def confirmable(self) -> int:
        """How many counted frames a PUBLISH_ACK may confirm: every one handled, but a
        fan-out in progress (the link handles none after it meanwhile)."""
        fanning = self._fanning_in
        return self.published_in if fanning is None else fanning[0] - 1

    @property
    def waiting_on_fanout(self) -> bool:
        """Reading is paused behind a fan-out from this link (the silence is ours)."""
        return self._behind is not None

    def _resume(self) -> None:
        if self.closed:
            self._behind = None
            return
        self.last_heard = now = self.hub.broker.now()  # silence is counted from here again
        self._handle_read(None, now)
        if self._behind is None and self.transport is not None and not self.closed:
            self.transport.resume_reading()

    def _release_held(self) -> None:
        held, self._held = self._held, []
        for data in held:
            if self.closed:  # offline meanwhile: the peer appends what we never confirmed
                return
            self.data_received(data)
        if (
            not self._held
            and self._behind is None
            and self.transport is not None
            and not self.closed
        ):
            self.transport.resume_reading()  # (not while a fan-out's frames wait their turn)

    @property
    def reading(self) -> bool:
        """Frames of one read are being handled (their confirmation follows the read)."""
        return self._reading

    @property
    def resuming(self) -> bool:
        """FEATURE_RESUME on both ends: counted frames are kept (not written) from HELLO
        until the peer's RESUME says where to start, and while the link is down."""
        return self._resuming

    @resuming.setter
    def resuming(self, value: bool) -> None:
        if value != self._resuming:
            self._resuming = value
            self.hub.links_changed()  # (its count of resuming links: ``may_hold``)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.resume_writing()
        self.hub.link_lost(self)

    def pause_writing(self) -> None:
        """The write buffer is above ``WRITE_HIGH``: local publishers whose messages go over
        the link from now on are paused (``forwarding``)."""
        self.writing_paused = True
        if self._paused_publishers is None:
            self._paused_publishers = set()

    def resume_writing(self) -> None:
        """The write buffer is below ``WRITE_LOW`` (or the link is gone): resume them."""
        self.writing_paused = False
        paused, self._paused_publishers = self._paused_publishers, None
        for conn in paused or ():
            conn.link.resume_reading()

    @property
    def congested(self) -> bool:
        """The write buffer is above its high-water mark."""
        return self._paused_publishers is not None

    def forwarding(self, message: Message) -> None:
        """``message`` goes over the link: while it is congested, its local publisher is
        paused (``link_backpressure.pause_publisher``)."""
        paused = self._paused_publishers
        if paused is not None:
            pause_publisher(self.hub.broker, paused, message)

    def send(self, data: bytes) -> None:
        if self.closed:
            return
        self._out.append(data)
        room = self._out_room - len(data)
        self._out_room = room
        if room < 0 and self._paused_publishers is None and self._measure_room() < 0:
            self._paused_publishers = set()  # congested before the turn's write (``_flush``)
        if not self._scheduled and not self._reading:  # (a read's: at its end, ``_read``)
            self._scheduled = True
            self._turn.add(self._flush_now)

    def call_soon(self, callback: Callable[..., object], *args: Any) -> None:
        """``callback(*args)`` on the next loop turn, in the loop the link runs in: its loop
        is looked up once (``get_running_loop()`` makes a ``getpid`` system call in Python
        3.11, and a link may schedule a PUBLISH_ACK per message)."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        loop.call_soon(callback, *args)

    def _flush(self) -> None:
        self._scheduled = False
        out, self._out = self._out, []
        transport = self.transport
        if transport is not None and not self.closed and out:
            transport.writelines(out)
            # ``_out_room`` counts what was just written as still buffered: a bound of the
            # room left, measured again (a generic method call) only when it runs low
            if self._out_room < ROOM_MEASURED or self._paused_publishers is not None:
                self._out_room = WRITE_HIGH - transport.get_write_buffer_size()
                if self._paused_publishers is not None and not self.writing_paused:
                    self.resume_writing()  # congested by ``send``, but it fitted under the mark

    def _measure_room(self) -> int:
        """``_out_room`` measured: the write buffer's room under ``WRITE_HIGH`` now, less
        this turn's frames not written yet (``send``'s bound ran out: is it the buffer?)."""
        transport = self.transport
        if transport is not None:
            buffered = transport.get_write_buffer_size()
            self._out_room = WRITE_HIGH - buffered - sum([len(frame) for frame in self._out])
        return self._out_room

    def wants_ack(self, keep: bool) -> bool:
        """Whether a PUBLISH frame sent now (kept or not: ``keep``) asks the peer for a
        PUBLISH_ACK: PUBLISH, else PUBLISH_UNKEPT (``link_frames.publish``). Every frame in
        ``unconfirmed`` asks for one; a frame not kept, to a peer that reads PUBLISH_UNKEPT,
        does not (nothing here waits for its confirmation)."""
        return keep or self.resuming or not self.unkept_publish

    def send_publish(
        self, data: bytes, message: Message, keep: bool, hold: DurableHold | None = None
    ) -> None:
        """Send a PUBLISH frame; ``keep`` it (and ``hold``) until the peer has recorded it.
        ``data``: PUBLISH, or PUBLISH_UNKEPT when ``wants_ack(keep)`` says none is wanted."""
        if self._paused_publishers is not None:
            self.forwarding(message)
        self.published_out += 1
        if keep or self.resuming:
            link_ledger.keep(self, (self.published_out, message, hold, None))
        if not self.resuming:
            self.send(data)

    def confirmed(self, count: int, reasons: dict[int, int] | None = None) -> None:
        """The peer's PUBLISH_ACK (``link_ledger.confirmed``)."""
        link_ledger.confirmed(self, count, reasons)

    def inherit(self, old: PeerLink) -> None:
        """A new link to the same run of the peer: take over what the old one kept and the
        counts of both directions (the peer's RESUME then says what to send again), and a
        fan-out in progress from it: its frame is confirmed on this link after its last
        slice, and this link's frames wait behind it (those behind it on the old link were
        not handled: the peer sends them again)."""
        self.unconfirmed = old.take_unconfirmed()
        self.published_out = old.published_out
        self.published_in = old.published_in
        self._fanning_in, old._fanning_in = old._fanning_in, None
        old._behind = None
        if self._fanning_in is not None:
            self._wait_for_fanout()

    def take_unconfirmed(self) -> deque[Unconfirmed]:
        """The link is gone: what the peer never confirmed (its holds still taken)."""
        unconfirmed, self.unconfirmed = self.unconfirmed, deque()
        return unconfirmed

    def confirm_shared(self, sequence: int) -> None:
        """A SHARED frame's message was acknowledged by its member (one ack frame per tick)."""
        self.received_shared.append(sequence)
        if not self._ack_scheduled:
            self._ack_scheduled = True
            self.call_soon(self._send_shared_ack)

    def _send_shared_ack(self) -> None:
        self._ack_scheduled = False
        acked, self.received_shared = self.received_shared, []
        self.send(shared_ack(acked))

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self._flush()
            self.closed = True
            self.transport.close()

    def abort(self) -> None:
        """Drop the connection at once (a peer not heard for the heartbeat timeout)."""
        if self.transport is not None and not self.closed:
            self.transport.abort()
