"""An in-memory asyncio transport for unit tests of protocols (``PeerLink``,
``MqttClientProtocol``): keeps what they write, records close and abort."""

from __future__ import annotations


class RecordingTransport:
    """Stands in for a socket transport; ``sent`` is everything written."""

    def __init__(self) -> None:
        self.sent = bytearray()
        self.closed = False
        self.aborted = False
        self.reading = True  # False between pause_reading() and resume_reading()

    def get_extra_info(self, name: str, default: object = None) -> object:
        return default

    def write(self, data: bytes) -> None:
        self.sent += data

    def writelines(self, lines: list[bytes]) -> None:
        for line in lines:
            self.sent += line

    def get_write_buffer_size(self) -> int:
        return 0  # the socket took everything

    def is_closing(self) -> bool:
        return self.closed

    def can_write_eof(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass
