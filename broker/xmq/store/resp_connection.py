"""A minimal pipelining Redis connection (RESP2) for the write path.

redis-py costs tens of microseconds per pipelined command in pure Python; the durable path
sends two commands per message, so it gets this lean protocol instead: commands are encoded
straight to bytes and replies parsed by hiredis (C), a batch goes out in one ``write``, and
replies are matched to callbacks in order. Several batches may be in flight at once on the
one socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections import deque
from collections.abc import Callable
from typing import Any

from hiredis import ProtocolError, Reader, pack_command

from xmq.core.turn_flush import TurnFlush
from xmq.store.redis_endpoint import RedisEndpoint
from xmq.store.resp_errors import NoRedisMaster, RedisConnectionLost, RedisReplyError

__all__ = [
    "NoRedisMaster",
    "RedisConnectionLost",
    "RedisReplyError",
    "RespConnection",
    "encode_command",
    "encode_lrem_one",
    "reply_reader",
]

Reply = Any


_KEEPALIVE = (("TCP_KEEPIDLE", 5), ("TCP_KEEPINTVL", 2), ("TCP_KEEPCNT", 3))
"""A Redis host that vanished (not a paused process: its kernel still answers) is noticed in
about 11 s and the connection dropped, so the batcher reconnects and re-sends."""


def _arg(value: Any) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, int | float):
        return repr(value).encode()
    raise TypeError(f"cannot send {type(value).__name__} to Redis")


def encode_command(args: tuple[Any, ...]) -> bytes:
    """One command as a RESP array of bulk strings (hiredis's encoder, in C)."""
    try:
        packed: bytes = pack_command(args)
    except TypeError:  # bool, bytearray, memoryview: hiredis takes str/int/float/bytes only
        parts = [b"*%d\r\n" % len(args)]
        for value in args:
            data = _arg(value)
            parts.append(b"$%d\r\n%b\r\n" % (len(data), data))
        return b"".join(parts)
    return packed


def encode_lrem_one(key: str, value: bytes) -> bytes:
    """``encode_command(("LREM", key, 1, value))`` from a template: the acknowledgement of every
    durable record sends one, and ``pack_command`` pays a ``sprintf`` per argument."""
    name = key.encode()
    # a literal format: the compiled build joins its parts in one allocation
    return b"*4\r\n$4\r\nLREM\r\n$%d\r\n%b\r\n$1\r\n1\r\n$%d\r\n%b\r\n" % (
        len(name),
        name,
        len(value),
        value,
    )


def reply_reader() -> Reader:
    """A RESP2 reply parser (hiredis, in C); error replies come out as ``RedisReplyError``."""
    return Reader(replyError=RedisReplyError)


class RespConnection(asyncio.Protocol):
    """One Redis connection; ``send`` pipelines, replies call back in order."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._reader = reply_reader()
        # the reader's methods bound once: called per reply (a method look-up each, else)
        self._feed: Callable[[bytes], None] = self._reader.feed
        self._gets: Callable[[], Reply] = self._reader.gets
        self._waiting: deque[Callable[[Reply], None]] = deque()
        loop = asyncio.get_running_loop()
        self.closed = loop.create_future()
        self.address = ""
        # the per-turn flush its reads are reads of (``read_in_turns``), and the loop's clock
        self._turn: TurnFlush | None = None
        self._time: Callable[[], float] = loop.time
        # the loop time at which the read running now began (``data_received`` as a read of
        # ``read_in_turns``' turn), 0.0 outside one: a reply's callback may take it as the time
        # of the reply, not read the clock again (``BatcherLink.reply_time``)
        self.read_at = 0.0
        # the loop time at which the latest such read began (kept after it): a time no later
        # than now, without a clock read (``RedisBatcher._defer``)
        self.last_read_at = 0.0

    @classmethod
    async def open(cls, endpoint: RedisEndpoint | str, timeout_s: float = 2.0) -> RespConnection:
        """Connect to the endpoint (a ``redis://`` or ``redis+sentinel://`` URL, see
        :mod:`xmq.store.redis_endpoint`): AUTH and SELECT when given; through sentinels, to
        the master they name, checked with ``ROLE``."""
        if isinstance(endpoint, str):
            endpoint = RedisEndpoint.parse(endpoint)
        async with asyncio.timeout(timeout_s):
            if endpoint.sentinels:
                host, port = await cls._master_of(endpoint)
            else:
                host, port = endpoint.host, endpoint.port
            conn = await cls._connect(host, port)
            setup: list[tuple[Any, ...]] = []
            if endpoint.password:
                setup.append(("AUTH", endpoint.username or "default", endpoint.password))
            if endpoint.db:
                setup.append(("SELECT", endpoint.db))
            if endpoint.sentinels:
                setup.append(("ROLE",))
            for args in setup:
                reply = await conn.call(*args)
                if isinstance(reply, RedisReplyError):
                    conn.close()
                    raise reply
                if args[0] == "ROLE" and not (isinstance(reply, list) and reply[0] == b"master"):
                    conn.close()
                    raise NoRedisMaster(f"{host}:{port} is not a master")
        return conn

    @classmethod
    async def _connect(cls, host: str, port: int) -> RespConnection:
        _, conn = await asyncio.get_running_loop().create_connection(cls, host, port)
        conn.address = f"{host}:{port}"
        return conn

    @classmethod
    async def _master_of(cls, endpoint: RedisEndpoint) -> tuple[str, int]:
        """Ask the sentinels in turn for the master's address (the first that knows wins)."""
        errors: list[str] = []
        for host, port in endpoint.sentinels:
            try:
                sentinel = await cls._connect(host, port)
            except OSError as error:
                errors.append(f"{host}:{port}: {error!r}")
                continue
            try:
                reply = await sentinel.call(
                    "SENTINEL", "get-master-addr-by-name", endpoint.master_name
                )
            finally:
                sentinel.close()
            if isinstance(reply, list) and len(reply) == 2:
                return reply[0].decode(), int(reply[1])
            errors.append(f"{host}:{port}: {reply!r}")
        raise NoRedisMaster(f"no master {endpoint.master_name!r}: {'; '.join(errors)}")

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
                for name, value in _KEEPALIVE:
                    if hasattr(socket, name):
                        sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)

    def send(self, payload: bytes, callbacks: list[Callable[[Reply], None]]) -> None:
        """Write encoded commands; ``callbacks`` get their replies in order."""
        if self.transport is None or self.transport.is_closing():
            raise RedisConnectionLost("not connected")
        self._waiting.extend(callbacks)
        self.transport.write(payload)

    def send_one(self, payload: bytes, callback: Callable[[Reply], None]) -> None:
        """Write one encoded command; ``callback`` gets its reply (``send`` without a list)."""
        transport = self.transport
        if transport is None or transport.is_closing():
            raise RedisConnectionLost("not connected")
        self._waiting.append(callback)
        transport.write(payload)

    def send_open(
        self, transport: asyncio.Transport, payload: bytes, callback: Callable[[Reply], None]
    ) -> None:
        """``send_one`` on ``transport``, which the caller just found open (``self.transport``,
        not closing: no second ``is_closing`` call)."""
        self._waiting.append(callback)
        transport.write(payload)

    async def call(self, *args: Any) -> Reply:
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()

        def done(reply: Reply) -> None:
            if not future.done():
                future.set_result(reply)

        self.send(encode_command(args), [done])
        return await future

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def read_in_turns(self, turn: TurnFlush) -> None:
        """Make each read a read of ``turn`` (``TurnFlush.begin_read``): what its replies' callbacks
        write (a delivery, a held PUBACK, the batcher's next flush) goes at the read's end, not
        in a ``call_soon`` of its own."""
        self._turn = turn

    def data_received(self, data: bytes) -> None:
        gets = self._gets
        waiting = self._waiting
        turn = self._turn
        outer = turn is not None and turn.begin_read()
        now = 0.0
        if outer:  # the read's time, once: its replies' callbacks' (``read_at``) and its end's
            now = self.read_at = self.last_read_at = self._time()
        try:
            self._feed(data)
            reply = gets()
            while reply is not False:
                if waiting:
                    waiting.popleft()(reply)
                reply = gets()
        except ProtocolError:
            self.close()  # not RESP: nothing after this can be matched to its command
        finally:
            if outer and turn is not None:
                self.read_at = 0.0
                turn.end_read(now)

    def connection_lost(self, exc: Exception | None) -> None:
        waiting, self._waiting = self._waiting, deque()
        error = RedisConnectionLost(str(exc) if exc else "connection closed")
        for callback in waiting:
            callback(error)
        if not self.closed.done():
            self.closed.set_result(None)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
