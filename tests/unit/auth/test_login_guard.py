from __future__ import annotations

import pytest

from xmq.auth.login_guard import GuardPolicy, LoginGuard, peer_address


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("peer", "address"),
    [("1.2.3.4:5678", "1.2.3.4"), ("[::1]:1883", "::1"), ("unix", "unix")],
    ids=["ipv4", "ipv6", "no-port"],
)
def test_peer_address(peer: str, address: str) -> None:
    assert peer_address(peer) == address


def test_per_user_limit_and_drain() -> None:
    clock = Clock()
    guard = LoginGuard(GuardPolicy(failures_per_user=3, window_seconds=30.0), clock)
    for port in range(3):
        assert guard.allowed("alice", f"10.0.0.{port}:1")
        guard.record_failure("alice", f"10.0.0.{port}:1")
    assert not guard.allowed("alice", "10.0.0.9:1")
    assert guard.allowed("bob", "10.0.0.9:1")
    assert guard.refused == 1
    clock.now += 10.0  # one failure drains every 10 s
    assert guard.allowed("alice", "10.0.0.9:1")
    guard.record_failure("alice", "10.0.0.9:1")
    assert not guard.allowed("alice", "10.0.0.9:1")


def test_per_address_limit_across_user_names() -> None:
    guard = LoginGuard(GuardPolicy(failures_per_user=100, failures_per_address=4), Clock())
    for index in range(4):
        guard.record_failure(f"user{index}", "192.0.2.1:1000")
    assert not guard.allowed("fresh", "192.0.2.1:2000")
    assert guard.allowed("fresh", "192.0.2.2:2000")


def test_success_resets_the_user_bucket() -> None:
    guard = LoginGuard(GuardPolicy(failures_per_user=2), Clock())
    guard.record_failure("alice", "10.0.0.1:1")
    guard.record_success("alice", "10.0.0.1:1")
    guard.record_failure("alice", "10.0.0.1:1")
    assert guard.allowed("alice", "10.0.0.1:1")


def test_tracking_is_bounded() -> None:
    guard = LoginGuard(GuardPolicy(failures_per_user=1, max_tracked=10), Clock())
    for index in range(100):
        guard.record_failure(f"user{index}", f"10.0.{index}.1:1")
    assert len(guard._users._levels) == 10
    assert guard.allowed("user0", "10.9.9.9:1")  # evicted
    assert not guard.allowed("user99", "10.9.9.9:1")
