"""Entry point of the operator process (``xmq-operator``)."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence

import kopf

DEFAULT_LIVENESS = "http://0.0.0.0:8080/healthz"


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
        help=f"liveness endpoint URL served by the operator (default {DEFAULT_LIVENESS})",
    )
    parser.add_argument("--verbose", action="store_true", help="debug logging")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the operator until it is stopped (SIGTERM / SIGINT)."""
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    import xmq_operator.handlers  # noqa: F401  (registers the handlers)

    kopf.run(
        standalone=True,
        clusterwide=not args.namespace,
        namespaces=args.namespace,
        liveness_endpoint=args.liveness,
    )
    return 0
