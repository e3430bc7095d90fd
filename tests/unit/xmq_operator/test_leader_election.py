"""Leader election on a Lease: one leader at a time, takeover only after the lease duration as
each candidate observes it, a clean release handing over at once (virtual clock)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from xmq_operator.kube_api import KubeError
from xmq_operator.leader_election import LeaderElector, LeaseRecord, micro_time


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class MemoryLeaseStore:
    """The API server's optimistic concurrency on one Lease (resourceVersion checked)."""

    def __init__(self) -> None:
        self.record: LeaseRecord | None = None
        self.version = 0
        self.down: bool | str = False
        self.writes: list[dict[str, Any]] = []

    def _check(self) -> None:
        if self.down == "refused":
            raise ConnectionRefusedError("apiserver not listening")
        if self.down:
            raise KubeError(503, "Service Unavailable", "apiserver away")

    def _store(self, spec: dict[str, Any]) -> LeaseRecord:
        self.version += 1
        self.writes.append(spec)
        self.record = LeaseRecord(
            holder=spec["holderIdentity"],
            duration_s=spec["leaseDurationSeconds"],
            transitions=spec["leaseTransitions"],
            version=str(self.version),
            acquire_time=spec.get("acquireTime"),
            renew_time=spec.get("renewTime"),
        )
        return self.record

    def read(self) -> LeaseRecord | None:
        self._check()
        return self.record

    def create(self, spec: dict[str, Any]) -> LeaseRecord:
        self._check()
        if self.record is not None:
            raise KubeError(409, "Conflict", "exists")
        return self._store(spec)

    def update(self, spec: dict[str, Any], version: str) -> LeaseRecord:
        self._check()
        if self.record is None or self.record.version != version:
            raise KubeError(409, "Conflict", "the object has been modified")
        return self._store(spec)


def _elector(store: MemoryLeaseStore, name: str, clock: Clock) -> LeaderElector:
    return LeaderElector(
        store,
        name,
        lease_duration_s=15,
        renew_deadline_s=10,
        retry_period_s=2,
        clock=clock,
        wall_clock=lambda: datetime(2026, 1, 1, tzinfo=UTC),
    )


def test_the_first_candidate_leads_and_the_second_waits_for_the_lease_duration() -> None:
    store, clock = MemoryLeaseStore(), Clock()
    a, b = _elector(store, "a", clock), _elector(store, "b", clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    # a renews: b sees the record change, so its 15 s count restarts each time.
    for _ in range(10):
        clock.now += 2
        assert a.renew_round()
        assert not b.try_acquire_or_renew()
    assert store.record is not None and store.record.holder == "a"
    # a stops renewing (dead): b takes over only once 15 s passed since it saw a change.
    clock.now += 14
    assert not b.try_acquire_or_renew()
    clock.now += 1
    assert b.try_acquire_or_renew()
    assert store.record.holder == "b"
    assert store.record.transitions == 1


def test_a_leader_that_cannot_renew_steps_down_before_anyone_may_take_over() -> None:
    store, clock = MemoryLeaseStore(), Clock()
    a, b = _elector(store, "a", clock), _elector(store, "b", clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    renewed_at = clock.now
    store.down = True
    clock.now += 4
    assert a.renew_round()  # still within the renew deadline
    store.down = "refused"  # not even an HTTP answer: a failed round all the same
    clock.now += 4
    assert a.renew_round()
    clock.now += 2
    assert not a.renew_round()  # 10 s without renewal: leadership given up
    assert not a.is_leader
    store.down = False
    # b may take over only at 15 s after it last saw the record change: a stepped down first.
    clock.now = renewed_at + 14.9
    assert not b.try_acquire_or_renew()
    clock.now = renewed_at + 15
    assert b.try_acquire_or_renew()


class RacingStore(MemoryLeaseStore):
    """Runs ``interleave`` between a candidate's read and its write (once)."""

    def __init__(self) -> None:
        super().__init__()
        self.interleave: Callable[[], None] | None = None

    def update(self, spec: dict[str, Any], version: str) -> LeaseRecord:
        step, self.interleave = self.interleave, None
        if step is not None:
            step()
        return super().update(spec, version)


def test_racing_candidates_for_a_free_lease_cannot_both_win() -> None:
    store, clock = RacingStore(), Clock()
    a, b = _elector(store, "a", clock), _elector(store, "b", clock)
    assert a.try_acquire_or_renew()
    a.release()
    assert store.record is not None and store.record.holder == ""
    c = _elector(store, "c", clock)
    b_won: list[bool] = []
    store.interleave = lambda: b_won.append(b.try_acquire_or_renew())
    # c read the free Lease; b reads it too and writes first; c's write is then stale.
    assert not c.try_acquire_or_renew()
    assert b_won == [True]
    assert store.record.holder == "b"
    assert not c.is_leader


def test_a_released_lease_is_taken_at_once() -> None:
    store, clock = MemoryLeaseStore(), Clock()
    a, b = _elector(store, "a", clock), _elector(store, "b", clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    a.release()
    assert not a.is_leader
    assert b.try_acquire_or_renew()
    assert store.record is not None and store.record.holder == "b"


def test_acquire_returns_when_stopped_and_hold_reports_the_loss() -> None:
    store, clock = MemoryLeaseStore(), Clock()
    a = _elector(store, "a", clock)
    store.record = LeaseRecord("other", 15, 0, "1")
    stop = threading.Event()
    stop.set()
    assert a.acquire(stop) is False
    lost: list[bool] = []
    a.last_renewed = clock.now - 11  # as if it led and then could not renew for 11 s
    store.down = True
    a.retry_period_s = 0.001
    a.hold(threading.Event(), lambda: lost.append(True))
    assert lost == [True]


def test_the_lease_spec_is_a_valid_kubernetes_lease() -> None:
    store, clock = MemoryLeaseStore(), Clock()
    a = _elector(store, "pod-a", clock)
    assert a.try_acquire_or_renew()
    (spec,) = store.writes
    assert spec["holderIdentity"] == "pod-a"
    assert spec["leaseDurationSeconds"] == 15
    assert spec["renewTime"] == spec["acquireTime"] == "2026-01-01T00:00:00.000000Z"
    assert micro_time(datetime(2026, 1, 1, 0, 0, 1, 5, tzinfo=UTC)) == "2026-01-01T00:00:01.000005Z"


def test_inconsistent_timings_are_refused() -> None:
    with pytest.raises(ValueError, match="retry_period < renew_deadline < lease_duration"):
        LeaderElector(MemoryLeaseStore(), "a", lease_duration_s=5, renew_deadline_s=10)
