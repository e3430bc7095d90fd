"""Network namespaces joined by one bridge, for partition tests (Linux, root, iproute2, nft).

Each member (a Redis, a broker node) gets a namespace of its own with one address on a private
/24; a hub namespace holds the bridge that joins them, and one veth joins the test's own
namespace to the bridge so that its clients reach every member (test traffic stays on these
veths: nothing leaves the machine). A member is cut from some others by an ``nft`` table on
the bridge that drops every packet between it and them (both directions, silently, in the
network rather than at either end: a real partition, where sends succeed, connection attempts
time out and established TCP connections go half-open), and healed by deleting that table.

Namespaces are named ``xqp<pid>-<member>``: :meth:`NamespaceNetwork.close` deletes this
network's (also after a failure), and a new network first deletes those of test processes
that are gone (a run killed before its clean-up).

Typical use (see ``tests/integration/cluster/test_partitions.py``)::

    with namespaced_cluster(f"part-{uid}", 3) as nodes:   # Redis + 3 nodes, linked
        nodes.address(3), nodes.port(3)                      # where clients reach node 3
        nodes.network.cut("node-3", ["redis"]) ... nodes.network.heal("node-3")
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import os
import random
import shutil
import subprocess
from collections.abc import Iterator, Sequence

import pytest

from tests.support.cluster_nodes import LEASE_TTL_S, ClusterNodes
from tests.support.redis_server import RedisServer, running_redis

PREFIX = "xqp"
_networks = itertools.count()


def _run(args: Sequence[str]) -> None:
    done = subprocess.run(list(args), capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"{' '.join(args)}: exit {done.returncode}: {done.stderr.strip()}")


def require_namespace_tools() -> None:
    """Fail (not skip) with what is missing: the partition tests need root, ``ip`` and
    ``nft`` (Debian packages iproute2 and nftables: ``scripts/setup-system``)."""
    missing = [tool for tool in ("ip", "nft") if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"{' and '.join(missing)} missing: run scripts/setup-system (as root)")
    if os.geteuid() != 0:
        pytest.fail("network namespace tests need root (ip netns, nft)")


def _namespaces() -> list[str]:
    listed = subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, check=False
    ).stdout
    return [line.split()[0] for line in listed.splitlines() if line.strip()]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_namespaces() -> None:
    """Delete the namespaces of partition tests whose process is gone."""
    for name in _namespaces():
        owner = name.removeprefix(PREFIX).partition("-")[0].partition("n")[0]
        if name.startswith(PREFIX) and owner.isdigit() and not _pid_alive(int(owner)):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)


def _free_subnet() -> ipaddress.IPv4Network:
    """A 10.213.x.0/24 that no route of the test's namespace covers."""
    routes = subprocess.run(
        ["ip", "-4", "route", "show"], capture_output=True, text=True, check=False
    ).stdout
    taken: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    for line in routes.splitlines():
        with contextlib.suppress(ValueError, IndexError):
            taken.append(ipaddress.ip_network(line.split()[0], strict=False))
    candidates = list(range(1, 255))
    random.shuffle(candidates)
    for third in candidates:
        subnet = ipaddress.IPv4Network(f"10.213.{third}.0/24")
        if not any(subnet.overlaps(route) for route in taken if route.prefixlen > 0):
            return subnet
    raise RuntimeError("no free 10.213.x.0/24 subnet")


class NamespaceNetwork:
    """Members in namespaces of their own on one bridge; :meth:`cut` partitions them."""

    def __init__(self) -> None:
        self.tag = f"{PREFIX}{os.getpid()}n{next(_networks)}"
        self.subnet = _free_subnet()
        hosts = self.subnet.hosts()
        self._addresses = iter([str(next(hosts)) for _ in range(200)])
        self.hub = f"{self.tag}-hub"
        self.root_link = f"{self.tag}h"[-15:]  # interface names: at most 15 characters
        self.members: dict[str, str] = {}  # member -> its address
        self._namespaces: list[str] = []

    def namespace(self, member: str) -> str:
        return f"{self.tag}-{member}"

    def open(self) -> None:
        """The hub (bridge) and the veth from the test's namespace to it."""
        self._add_namespace(self.hub)
        _run(["ip", "-n", self.hub, "link", "add", "br0", "type", "bridge"])
        _run(["ip", "-n", self.hub, "link", "set", "br0", "up"])
        address = next(self._addresses)
        _run(
            ["ip", "link", "add", self.root_link, "type", "veth"]
            + ["peer", "name", "m0", "netns", self.hub]
        )
        self._attach("m0")
        _run(["ip", "addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", self.root_link])
        _run(["ip", "link", "set", self.root_link, "up"])

    def add(self, member: str) -> str:
        """A namespace for ``member`` with one address on the bridge; return the address."""
        namespace = self.namespace(member)
        self._add_namespace(namespace)
        port = f"m{len(self.members) + 1}"
        _run(
            ["ip", "link", "add", "eth0", "netns", namespace, "type", "veth"]
            + ["peer", "name", port, "netns", self.hub]
        )
        self._attach(port)
        address = next(self._addresses)
        _run(["ip", "-n", namespace, "addr", "add", f"{address}/24", "dev", "eth0"])
        _run(["ip", "-n", namespace, "link", "set", "eth0", "up"])
        _run(["ip", "-n", namespace, "link", "set", "lo", "up"])
        self.members[member] = address
        return address

    def command(self, member: str, argv: Sequence[str]) -> list[str]:
        """``argv`` run in ``member``'s namespace (``ip netns exec`` execs it: same pid)."""
        return ["ip", "netns", "exec", self.namespace(member), *argv]

    def cut(self, member: str, others: Sequence[str]) -> None:
        """Drop every packet between ``member`` and ``others``, both ways, on the bridge (in
        the network, not at either end: their sends succeed and go unanswered)."""
        _run(self.cut_command(member, others))

    def heal(self, member: str) -> None:
        """Remove ``member``'s cut."""
        _run(self.heal_command(member))

    def cut_command(self, member: str, others: Sequence[str]) -> list[str]:
        """The argv of :meth:`cut` (e.g. for ``xmq bench survivability --cut-cmd``)."""
        table = self._cut_table(member)
        one = self.members[member]
        peers = ", ".join(self.members[other] for other in others)
        rules = (
            f"add table bridge {table}; "
            f"add chain bridge {table} forward {{ type filter hook forward priority 0; }}; "
            f"add rule bridge {table} forward ip saddr {one} ip daddr {{ {peers} }} drop; "
            f"add rule bridge {table} forward ip saddr {{ {peers} }} ip daddr {one} drop"
        )
        return ["ip", "netns", "exec", self.hub, "nft", rules]

    def heal_command(self, member: str) -> list[str]:
        """The argv of :meth:`heal`."""
        table = self._cut_table(member)
        return ["ip", "netns", "exec", self.hub, "nft", "delete", "table", "bridge", table]

    @staticmethod
    def _cut_table(member: str) -> str:
        return "cut_" + "".join(c if c.isalnum() else "_" for c in member)

    def close(self) -> None:
        """Delete every namespace of this network (their veths go with them)."""
        for namespace in reversed(self._namespaces):
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True, check=False)
        self._namespaces.clear()
        subprocess.run(["ip", "link", "del", self.root_link], capture_output=True, check=False)

    def _add_namespace(self, namespace: str) -> None:
        _run(["ip", "netns", "add", namespace])
        self._namespaces.append(namespace)

    def _attach(self, port: str) -> None:
        _run(["ip", "-n", self.hub, "link", "set", port, "master", "br0"])
        _run(["ip", "-n", self.hub, "link", "set", port, "up"])


@contextlib.contextmanager
def namespace_network() -> Iterator[NamespaceNetwork]:
    """A :class:`NamespaceNetwork`, deleted afterwards (also when the test fails)."""
    require_namespace_tools()
    remove_stale_namespaces()
    network = NamespaceNetwork()
    try:
        network.open()
        yield network
    finally:
        network.close()


class NamespacedNodes(ClusterNodes):
    """Cluster nodes ``node-<index>``, each in a namespace of ``network``'s (added on start)."""

    def __init__(
        self, network: NamespaceNetwork, redis: RedisServer, cluster: str, lease_ttl_s: float
    ) -> None:
        super().__init__(redis, cluster, lease_ttl_s=lease_ttl_s)
        self.network = network

    def place(self, index: int) -> tuple[str, tuple[str, ...]]:
        member = f"node-{index}"
        if member not in self.network.members:
            self.network.add(member)
        return self.network.members[member], tuple(self.network.command(member, []))

    def address(self, index: int) -> str:
        return self.network.members[f"node-{index}"]


@contextlib.contextmanager
def namespaced_cluster(
    cluster: str, count: int, lease_ttl_s: float = LEASE_TTL_S
) -> Iterator[NamespacedNodes]:
    """A network with a Redis and ``count`` linked nodes, each in a namespace of its own;
    every process stopped and every namespace deleted afterwards (also after a failure)."""
    with namespace_network() as network:
        address = network.add("redis")
        wrapper = tuple(network.command("redis", []))
        # reached over the private bridge only: no protected mode (loopback-only otherwise)
        private = ("--protected-mode", "no")
        with running_redis(bind=address, wrapper=wrapper, extra_args=private) as redis:
            nodes = NamespacedNodes(network, redis, cluster, lease_ttl_s)
            try:
                nodes.start_many(count)
                yield nodes
            finally:
                nodes.stop_all()
