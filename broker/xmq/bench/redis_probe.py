"""Redis CPU and command counts over a run (``--redis-url``), for the cluster scenarios.

Redis reports its own CPU (``INFO cpu``: used_cpu_user + used_cpu_sys, seconds) and per-command
call counts (``INFO commandstats``), so no PID is needed and a remote Redis works too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import redis


@dataclass(frozen=True, slots=True)
class RedisSample:
    cpu_s: float
    commands: int
    calls: dict[str, int] = field(default_factory=dict)


def parse_commandstats(info: dict[str, object]) -> dict[str, int]:
    """``{'cmdstat_get': {'calls': 5, ...}}`` -> ``{'get': 5}``."""
    calls: dict[str, int] = {}
    for key, value in info.items():
        if key.startswith("cmdstat_") and isinstance(value, dict):
            count = value.get("calls", 0)
            calls[key.removeprefix("cmdstat_")] = int(count) if isinstance(count, int | str) else 0
    return calls


class RedisProbe:
    def __init__(self, url: str) -> None:
        self.url = url
        self._client = redis.Redis.from_url(url, socket_timeout=2.0)

    def sample(self, with_commands: bool = False) -> RedisSample | None:
        try:
            cpu = self._client.info("cpu")
            stats = self._client.info("stats")
            calls = parse_commandstats(self._client.info("commandstats")) if with_commands else {}
        except redis.RedisError:
            return None
        used = float(cpu.get("used_cpu_user", 0.0)) + float(cpu.get("used_cpu_sys", 0.0))
        return RedisSample(used, int(stats.get("total_commands_processed", 0)), calls)

    def close(self) -> None:
        self._client.close()


def command_delta(before: RedisSample, after: RedisSample) -> dict[str, int]:
    """Calls per command between two samples taken ``with_commands``, busiest first."""
    delta = {
        name: count - before.calls.get(name, 0)
        for name, count in after.calls.items()
        if count - before.calls.get(name, 0) > 0
    }
    return dict(sorted(delta.items(), key=lambda item: -item[1]))
