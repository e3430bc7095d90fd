from __future__ import annotations

from xmq_operator.main import DEFAULT_LIVENESS, parse_args


def test_defaults_watch_all_namespaces_with_a_liveness_endpoint() -> None:
    args = parse_args([])
    assert args.namespace == []
    assert args.liveness == DEFAULT_LIVENESS


def test_namespaces_are_repeatable() -> None:
    assert parse_args(["--namespace", "a", "--namespace", "b"]).namespace == ["a", "b"]


def test_leader_election_is_off_unless_a_namespace_is_given() -> None:
    assert parse_args([]).leader_election_namespace == ""
    args = parse_args(["--leader-election-namespace", "ops", "--leader-election-name", "x"])
    assert (args.leader_election_namespace, args.leader_election_name) == ("ops", "x")
    assert args.lease_duration > args.renew_deadline > args.retry_period
