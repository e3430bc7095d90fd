"""Entry point of the operator process (``xmq-operator``).

With ``--leader-election-namespace`` several replicas may run: each waits for the leader
Lease (``coordination.k8s.io/v1``) and only its holder runs the handlers. A leader that cannot
renew the Lease stops its handlers and exits 1 (the kubelet restarts it as a candidate); a
leader stopped by SIGTERM releases the Lease so a standby takes over at once.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import threading
import urllib.parse
from collections.abc import Sequence
from types import FrameType

import kopf

from xmq_operator.leader_election import KubeLeaseStore, LeaderElector
from xmq_operator.operator_metrics import METRICS, OperatorEndpoint

DEFAULT_LIVENESS = "http://0.0.0.0:8080/healthz"
DEFAULT_LEASE_NAME = "xmq-operator"
logger = logging.getLogger("xmq_operator")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="xmq-operator", description="Reconcile XmqCluster resources (kopf)."
    )
    parser.add_argument(
        "--namespace",
        action="append",
        default=[],
        help="watch only this namespace (repeatable); default: all namespaces",
    )
    parser.add_argument(
        "--liveness",
        default=DEFAULT_LIVENESS,
        help=f"liveness endpoint URL served by the operator (default {DEFAULT_LIVENESS}); "
        "the same port serves /metrics",
    )
    parser.add_argument(
        "--leader-election-namespace",
        default="",
        help="elect a leader through a Lease in this namespace (default: no election)",
    )
    parser.add_argument(
        "--leader-election-name",
        default=DEFAULT_LEASE_NAME,
        help=f"name of the leader Lease (default {DEFAULT_LEASE_NAME})",
    )
    parser.add_argument(
        "--identity",
        default=f"{socket.gethostname()}-{os.getpid()}",
        help="this replica's name in the Lease (default: host name and pid)",
    )
    parser.add_argument("--lease-duration", type=float, default=15.0, help=argparse.SUPPRESS)
    parser.add_argument("--renew-deadline", type=float, default=10.0, help=argparse.SUPPRESS)
    parser.add_argument("--retry-period", type=float, default=2.0, help=argparse.SUPPRESS)
    parser.add_argument("--verbose", action="store_true", help="debug logging")
    return parser.parse_args(argv)


def _endpoint(url: str) -> OperatorEndpoint:
    parsed = urllib.parse.urlsplit(url)
    return OperatorEndpoint(
        METRICS, parsed.hostname or "0.0.0.0", parsed.port or 8080, parsed.path or "/healthz"
    )


def _elector(args: argparse.Namespace) -> LeaderElector:
    from xmq_operator.kube_api import KubeApi, load_configuration

    load_configuration()
    store = KubeLeaseStore(KubeApi(), args.leader_election_namespace, args.leader_election_name)
    return LeaderElector(
        store,
        args.identity,
        lease_duration_s=args.lease_duration,
        renew_deadline_s=args.renew_deadline,
        retry_period_s=args.retry_period,
    )


def _wait_for_leadership(elector: LeaderElector) -> bool:
    """Block until leader (True) or SIGTERM/SIGINT (False)."""
    stop = threading.Event()

    def stopping(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, stopping) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        logger.info("waiting for the leader lease as %s", elector.identity)
        return elector.acquire(stop)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the operator until it is stopped (SIGTERM / SIGINT); 1 when leadership is lost."""
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from xmq_operator.handlers import WATCHED_NAMESPACES  # (and registers the handlers)

    endpoint = _endpoint(args.liveness)
    endpoint.start()
    elector = _elector(args) if args.leader_election_namespace else None
    if elector is not None and not _wait_for_leadership(elector):
        endpoint.stop()
        return 0
    stop_kopf = threading.Event()
    lost = threading.Event()
    stop_renewing = threading.Event()
    renewer: threading.Thread | None = None
    if elector is not None:

        def on_lost() -> None:
            METRICS.set_leader(False)
            lost.set()
            stop_kopf.set()

        renewer = threading.Thread(
            target=elector.hold, args=(stop_renewing, on_lost), name="leader-lease", daemon=True
        )
        renewer.start()
    METRICS.set_leader(True)
    try:
        kopf.run(
            standalone=True,
            clusterwide=not args.namespace,
            namespaces=args.namespace,
            stop_flag=stop_kopf,
            memo=kopf.Memo({WATCHED_NAMESPACES: tuple(args.namespace)}),
        )
    finally:
        stop_renewing.set()
        METRICS.set_leader(False)
        if renewer is not None:
            renewer.join(timeout=args.renew_deadline)
        if elector is not None and not lost.is_set():
            elector.release()
        endpoint.stop()
    return 1 if lost.is_set() else 0
