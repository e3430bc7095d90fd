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
from xmq.native_build import BUILD, BUILD_REASON


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="xmq", description="XMQ MQTT broker")
    parser.add_argument(
        "--version", action="version", version=f"xmq {__version__} ({BUILD} build: {BUILD_REASON})"
    )
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run a broker node (in memory by default)")
    serve.add_argument("-c", "--config", help="YAML configuration file")
    serve.add_argument("--host", help="bind address of the default listener")
    serve.add_argument("--port", type=int, help="port of the default listener (0: any free)")

    check = commands.add_parser(
        "check-config",
        help="check a configuration file and what `serve` needs: files, ports, hosts",
    )
    check.add_argument("file")
    check.add_argument(
        "--no-bind",
        action="store_true",
        help="do not test-bind the ports (a node with this config is running)",
    )

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
    drain.add_argument(
        "--token-file",
        help="file with the admin bearer token (default: metrics.admin_token_file of the "
        "config; without one the request goes unauthenticated, which a node accepts from "
        "loopback only)",
    )

    commands.add_parser(
        "bench", help="run a benchmark scenario (see xmq bench --help)", add_help=False
    )
    add_accounts_commands(commands)  # db, users, groups, acl (PostgreSQL account store)
    add_cluster_commands(commands)  # cluster up, cluster status
    return parser


def _env_source(loc: tuple[int | str, ...]) -> str | None:
    """The ``XMQ_*`` variable that set the value at ``loc``, if one is set."""
    names: list[str] = []
    for part in loc:
        if not isinstance(part, str):
            break
        names.append(f"XMQ_{part.upper()}" if not names else f"{names[-1]}__{part.upper()}")
    return next((name for name in reversed(names) if name in os.environ), None)


def _config_errors(error: ValidationError) -> list[str]:
    """One line per problem: ``invalid configuration: <field>: <what> (from XMQ_...)``."""
    from xmq.config.reference_doc import describe_errors

    lines = []
    for item, text in zip(error.errors(), describe_errors(error), strict=True):
        source = _env_source(tuple(item["loc"]))
        suffix = f" (from {source})" if source else ""
        lines.append(f"invalid configuration: {text}{suffix}")
    return lines


def _startup_problem(error: BaseException, config_path: str | None) -> str | None:
    """The one-line message of a start-up error, or None when ``error`` is not one."""
    import yaml
    from pydantic_settings import SettingsError

    from xmq.app.preflight import StartupError
    from xmq.cluster.link_tls import LinkTlsError

    if isinstance(error, StartupError | LinkTlsError | FileNotFoundError):
        return str(error)
    if isinstance(error, yaml.YAMLError):
        mark = getattr(error, "problem_mark", None)
        problem = getattr(error, "problem", None) or str(error)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        return f"{config_path}: YAML syntax error{where}: {problem}"
    if isinstance(error, SettingsError):
        # 'error parsing value for field "listeners" from source "EnvSettingsSource"'
        field = str(error).split('"')[1] if str(error).count('"') >= 2 else "?"
        cause = error.__cause__
        return f"XMQ_{field.upper()}: not valid JSON: {cause or error}"
    return None


def _admin_urls(config_path: str | None) -> list[str]:
    """The local node's admin endpoints (one per worker), from its config file (the pod's
    preStop hook): ``metrics.port + 1 + i`` for worker ``i``."""
    from xmq.app.worker_plan import admin_ports

    path = config_path or os.environ.get(CONFIG_FILE_ENV) or CONFIG_PATH
    ports = [HEALTH_PORT]
    if path and os.path.isfile(path):
        ports = admin_ports(_read_config(path))
    return [f"http://127.0.0.1:{port}" for port in ports]


def _admin_url(config_path: str | None) -> str:
    """The admin endpoint of the local node (of worker 0 when there are several)."""
    return _admin_urls(config_path)[0]


def _admin_authorization(config_path: str | None, token_file: str | None) -> str | None:
    """The ``Authorization`` header ``xmq drain`` sends: the token of ``--token-file``, else of
    the node's ``metrics.admin_token_file``; None without either."""
    from pathlib import Path

    from xmq.observability.admin_access import AdminAccess

    if token_file is None:
        path = config_path or os.environ.get(CONFIG_FILE_ENV) or CONFIG_PATH
        configured = _read_config(path).metrics.admin_token_file if os.path.isfile(path) else None
        if configured is None:
            return None
        return AdminAccess(configured).header()
    return AdminAccess(Path(token_file)).header()


def _drain(url: str, server_reference: str | None, authorization: str | None = None) -> int:
    import urllib.error
    import urllib.parse
    import urllib.request

    query = urllib.parse.urlencode(
        {"server_reference": server_reference} if server_reference else {}
    )
    target = url.rstrip("/") + "/admin/drain" + (f"?{query}" if query else "")
    headers = {"Authorization": authorization} if authorization else {}
    request = urllib.request.Request(target, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            print(response.read().decode().strip())
    except (urllib.error.URLError, OSError) as error:
        print(f"drain failed: {target}: {error}", file=sys.stderr)
        return 1
    return 0


def _read_config(path: str | None) -> BrokerConfig:
    """``load_config``, with a file that is not a YAML mapping of settings named as such."""
    from pydantic_settings import SettingsError

    from xmq.app.preflight import StartupError

    try:
        return load_config(path)
    except (ValidationError, SettingsError):
        raise
    except ValueError as error:  # a list or a scalar, bytes that are not UTF-8
        raise StartupError(
            f"{path}: not a YAML mapping of settings ({type(error).__name__}: {error})"
        ) from error


def _load(path: str | None, host: str | None = None, port: int | None = None) -> BrokerConfig:
    config = _read_config(path)
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
    config_path = getattr(args, "config", None) or getattr(args, "file", None)
    try:
        return _run(args)
    except ValidationError as error:
        for line in _config_errors(error):
            print(f"xmq: {line}", file=sys.stderr)
        return 2
    except Exception as error:  # at start: one line naming the field or file, no traceback
        problem = _startup_problem(error, config_path)
        if problem is not None:
            print(f"xmq: {_one_line(problem)}", file=sys.stderr)
            return 2
        if args.command not in ("serve", "check-config", "drain"):
            raise
        message = _one_line(f"{type(error).__name__}: {error}")
        print(f"xmq: {args.command} failed: {message}", file=sys.stderr)
        return 1


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _run(args: argparse.Namespace) -> int:
    if args.command == "check-config":
        from xmq.app.preflight import check_startup

        config = _read_config(args.file)
        check_startup(config, bind=not args.no_bind)
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
        authorization = _admin_authorization(args.config, args.token_file)
        failed = [url for url in urls if _drain(url, args.server_reference, authorization) != 0]
        return 1 if failed else 0
    if args.command == "serve":
        from xmq.app.cluster_redis import ClusterIdentityError
        from xmq.app.server import serve

        try:
            return serve(_load(args.config, args.host, args.port), args.config)
        except ClusterIdentityError as error:  # another cluster's Redis namespace
            print(f"xmq: refusing to start: {_one_line(str(error))}", file=sys.stderr)
            return 2
    return 2
