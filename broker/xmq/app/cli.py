"""The ``xmq`` command line."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from pydantic import ValidationError

from xmq import __version__
from xmq.app.accounts_cli import add_accounts_commands
from xmq.app.cluster_cli import add_cluster_commands
from xmq.config import BrokerConfig, ListenerConfig, load_config
from xmq.contract.pod import CONFIG_FILE_ENV, CONFIG_PATH, HEALTH_PORT


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="xmq", description="XMQ MQTT broker")
    parser.add_argument("--version", action="version", version=f"xmq {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run a broker node (in memory by default)")
    serve.add_argument("-c", "--config", help="YAML configuration file")
    serve.add_argument("--host", help="bind address of the default listener")
    serve.add_argument("--port", type=int, help="port of the default listener (0: any free)")

    check = commands.add_parser("check-config", help="validate a configuration file")
    check.add_argument("file")

    config_doc = commands.add_parser(
        "config-doc", help="print the configuration reference (docs/configuration.md)"
    )
    config_doc.add_argument("-o", "--output", help="write to this file instead of stdout")

    drain = commands.add_parser(
        "drain", help="drain a running node: stop accepting, move its clients away"
    )
    drain.add_argument(
        "--url",
        help="the node's metrics/admin endpoint (default: 127.0.0.1 and metrics.port of "
        f"--config, ${CONFIG_FILE_ENV} or {CONFIG_PATH}, else port {HEALTH_PORT}; with "
        "workers, every worker's port metrics.port + 1 + i)",
    )
    drain.add_argument("-c", "--config", help="YAML configuration file of the node")
    drain.add_argument(
        "--server-reference", help="Server Reference sent with DISCONNECT 0x9C (host:port)"
    )

    commands.add_parser(
        "bench", help="run a benchmark scenario (see xmq bench --help)", add_help=False
    )
    add_accounts_commands(commands)  # db, users, groups, acl (PostgreSQL account store)
    add_cluster_commands(commands)  # cluster up, cluster status
    return parser


def _config_error(error: ValidationError) -> str:
    from xmq.config.reference_doc import describe_errors

    return "invalid configuration:\n" + "\n".join(f"  {line}" for line in describe_errors(error))


def _admin_urls(config_path: str | None) -> list[str]:
    """The local node's admin endpoints (one per worker), from its config file (the pod's
    preStop hook): ``metrics.port + 1 + i`` for worker ``i``."""
    from xmq.app.worker_plan import admin_ports

    path = config_path or os.environ.get(CONFIG_FILE_ENV) or CONFIG_PATH
    ports = [HEALTH_PORT]
    if path and os.path.isfile(path):
        ports = admin_ports(load_config(path))
    return [f"http://127.0.0.1:{port}" for port in ports]


def _admin_url(config_path: str | None) -> str:
    """The admin endpoint of the local node (of worker 0 when there are several)."""
    return _admin_urls(config_path)[0]


def _drain(url: str, server_reference: str | None) -> int:
    import urllib.error
    import urllib.parse
    import urllib.request

    query = urllib.parse.urlencode(
        {"server_reference": server_reference} if server_reference else {}
    )
    target = url.rstrip("/") + "/admin/drain" + (f"?{query}" if query else "")
    request = urllib.request.Request(target, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            print(response.read().decode().strip())
    except (urllib.error.URLError, OSError) as error:
        print(f"drain failed: {target}: {error}", file=sys.stderr)
        return 1
    return 0


def _load(path: str | None, host: str | None = None, port: int | None = None) -> BrokerConfig:
    config = load_config(path)
    if host is not None or port is not None:
        first = config.listeners[0] if config.listeners else ListenerConfig()
        changed = first.model_copy(
            update={k: v for k, v in (("host", host), ("port", port)) if v is not None}
        )
        config = config.model_copy(update={"listeners": (changed, *config.listeners[1:])})
    return config


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["bench"]:
        from xmq.bench.cli import main as bench_main

        return bench_main(args_list[1:])
    args = _parser().parse_args(args_list)
    handler = getattr(args, "func", None)
    if handler is not None:
        result: int = handler(args)
        return result
    try:
        if args.command == "check-config":
            load_config(args.file)
            print(f"{args.file}: OK")
            return 0
        if args.command == "config-doc":
            from xmq.config.reference_doc import render_reference

            text = render_reference()
            if args.output:
                with open(args.output, "w", encoding="utf-8") as out:
                    out.write(text)
            else:
                sys.stdout.write(text)
            return 0
        if args.command == "drain":
            urls = [args.url] if args.url else _admin_urls(args.config)
            failed = [url for url in urls if _drain(url, args.server_reference) != 0]
            return 1 if failed else 0
        if args.command == "serve":
            from xmq.app.cluster_runtime import ClusterIdentityError
            from xmq.app.server import serve
            from xmq.cluster.link_tls import LinkTlsError

            try:
                return serve(_load(args.config, args.host, args.port), args.config)
            except LinkTlsError as error:
                print(f"invalid configuration:\n  {error}", file=sys.stderr)
                return 2
            except ClusterIdentityError as error:
                print(f"refusing to start: {error}", file=sys.stderr)
                return 2
    except ValidationError as error:
        print(_config_error(error), file=sys.stderr)
        return 2
    except FileNotFoundError as error:
        print(str(error), file=sys.stderr)
        return 2
    return 2
