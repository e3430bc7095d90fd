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
SHUTDOWN_GRACE_S = 10.0
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


def _run_kopf(args: argparse.Namespace, stop: threading.Event, failed: list[BaseException]) -> None:
    """kopf in this thread (the main thread owns the signals), until ``stop`` is set."""
    from xmq_operator.handlers import WATCHED_NAMESPACES

    try:
        kopf.run(
            standalone=True,
            clusterwide=not args.namespace,
            namespaces=args.namespace,
            stop_flag=stop,
            memo=kopf.Memo({WATCHED_NAMESPACES: tuple(args.namespace)}),
        )
    except BaseException as exc:  # reported by main: the process exits 1
        failed.append(exc)
        logger.exception("the operator stopped on an error")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the operator until SIGTERM / SIGINT (exit 0); 1 when leadership is lost or kopf
    failed. Signals are the main thread's: kopf runs in a thread and is stopped by a flag, and
    a kopf that does not stop within ``SHUTDOWN_GRACE_S`` is left behind (the process exits)."""
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    import xmq_operator.handlers  # noqa: F401  (registers the handlers)

    stop = threading.Event()

    def stopping(signum: int, frame: FrameType | None) -> None:
        logger.info("signal %s: stopping", signal.Signals(signum).name)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stopping)
    endpoint = _endpoint(args.liveness)
    endpoint.start()
    elector = _elector(args) if args.leader_election_namespace else None
    if elector is not None:
        logger.info("waiting for the leader lease as %s", elector.identity)
        if not elector.acquire(stop):
            endpoint.stop()
            return 0
    lost = threading.Event()
    stop_renewing = threading.Event()
    renewer: threading.Thread | None = None
    if elector is not None:

        def on_lost() -> None:
            METRICS.set_leader(False)
            lost.set()
            stop.set()

        renewer = threading.Thread(
            target=elector.hold, args=(stop_renewing, on_lost), name="leader-lease", daemon=True
        )
        renewer.start()
    METRICS.set_leader(True)
    failed: list[BaseException] = []
    operator = threading.Thread(
        target=_run_kopf, args=(args, stop, failed), name="kopf", daemon=True
    )
    operator.start()
    try:
        while operator.is_alive() and not stop.wait(0.5):
            pass
        stop.set()
        operator.join(timeout=SHUTDOWN_GRACE_S)
        if operator.is_alive():
            logger.error("kopf did not stop within %.0fs: exiting anyway", SHUTDOWN_GRACE_S)
    finally:
        stop_renewing.set()
        METRICS.set_leader(False)
        if renewer is not None:
            renewer.join(timeout=args.renew_deadline)
        if elector is not None and not lost.is_set():
            elector.release()
        endpoint.stop()
    return 1 if lost.is_set() or failed else 0
