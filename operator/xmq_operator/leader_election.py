"""Leader election on a ``coordination.k8s.io/v1`` Lease, so only one operator replica acts.

The algorithm is client-go's: a candidate takes the Lease when it is free (no holder) or when
its record has not changed for ``lease_duration`` seconds *as this process observed it* (its
own monotonic clock, so clock skew between nodes does not matter). The leader renews every
``retry_period``; when it has not renewed for ``renew_deadline`` (< ``lease_duration``) it
gives up leadership before any other candidate may take over. Writes carry the Lease's
``resourceVersion``, so two candidates racing for a free Lease cannot both win.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import urllib3

from xmq_operator.kube_api import KubeApi, KubeError

logger = logging.getLogger(__name__)

LEASES_PATH = "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"
ROUND_FAILURES = (KubeError, OSError, urllib3.exceptions.HTTPError, ValueError, KeyError)
"""What makes one election round fail (API errors, connection errors, odd answers)."""


def micro_time(moment: datetime) -> str:
    """A Kubernetes ``MicroTime`` (RFC 3339 with microseconds, UTC)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The fields of a Lease the election reads (``version``: its resourceVersion)."""

    holder: str
    duration_s: int
    transitions: int
    version: str
    acquire_time: str | None = None
    renew_time: str | None = None


class LeaseStore(Protocol):
    """Reads and writes one Lease; ``create``/``update`` raise :class:`KubeError` on conflict."""

    def read(self) -> LeaseRecord | None: ...

    def create(self, spec: dict[str, Any]) -> LeaseRecord: ...

    def update(self, spec: dict[str, Any], version: str) -> LeaseRecord: ...


def _record(body: dict[str, Any]) -> LeaseRecord:
    spec = body.get("spec") or {}
    return LeaseRecord(
        holder=str(spec.get("holderIdentity") or ""),
        duration_s=int(spec.get("leaseDurationSeconds") or 0),
        transitions=int(spec.get("leaseTransitions") or 0),
        version=str(body["metadata"]["resourceVersion"]),
        acquire_time=spec.get("acquireTime"),
        renew_time=spec.get("renewTime"),
    )


class KubeLeaseStore:
    """The Lease ``name`` in ``namespace`` on the API server."""

    def __init__(self, kube: KubeApi, namespace: str, name: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.collection = LEASES_PATH.format(ns=urllib.parse.quote(namespace, safe=""))
        self.path = f"{self.collection}/{urllib.parse.quote(name, safe='')}"

    def _body(self, spec: dict[str, Any], version: str | None) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if version is not None:
            metadata["resourceVersion"] = version
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": spec,
        }

    def read(self) -> LeaseRecord | None:
        try:
            return _record(self.kube.request("GET", self.path))
        except KubeError as exc:
            if exc.not_found:
                return None
            raise

    def create(self, spec: dict[str, Any]) -> LeaseRecord:
        return _record(self.kube.request("POST", self.collection, body=self._body(spec, None)))

    def update(self, spec: dict[str, Any], version: str) -> LeaseRecord:
        return _record(self.kube.request("PUT", self.path, body=self._body(spec, version)))


class LeaderElector:
    """One candidate: ``acquire`` blocks until it leads, ``hold`` renews until it stops."""

    def __init__(
        self,
        store: LeaseStore,
        identity: str,
        *,
        lease_duration_s: float = 15.0,
        renew_deadline_s: float = 10.0,
        retry_period_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        if not retry_period_s < renew_deadline_s < lease_duration_s:
            raise ValueError("need retry_period < renew_deadline < lease_duration")
        self.store = store
        self.identity = identity
        self.lease_duration_s = lease_duration_s
        self.renew_deadline_s = renew_deadline_s
        self.retry_period_s = retry_period_s
        self.clock = clock
        self.wall_clock = wall_clock
        self.observed: LeaseRecord | None = None
        self.observed_at = 0.0
        self.last_renewed: float | None = None
        self.transitions_seen = 0

    @property
    def is_leader(self) -> bool:
        return self.last_renewed is not None

    def _spec(self, previous: LeaseRecord | None) -> dict[str, Any]:
        now = micro_time(self.wall_clock())
        ours = previous is not None and previous.holder == self.identity
        transitions = previous.transitions if previous is not None else 0
        acquire = previous.acquire_time if ours and previous is not None else now
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.lease_duration_s)),
            "acquireTime": acquire,
            "renewTime": now,
            "leaseTransitions": transitions if ours or previous is None else transitions + 1,
        }

    def try_acquire_or_renew(self) -> bool:
        """One round: True when this candidate holds the Lease afterwards."""
        now = self.clock()
        try:
            current = self.store.read()
            if current is None:
                record = self.store.create(self._spec(None))
            else:
                if self.observed is None or current != self.observed:
                    self.observed, self.observed_at = current, now
                held_by_other = current.holder and current.holder != self.identity
                if held_by_other and now < self.observed_at + current.duration_s:
                    return False
                record = self.store.update(self._spec(current), current.version)
        except ROUND_FAILURES as exc:
            # A conflict is another candidate's write winning the race; anything else
            # (API server away, RBAC) is a failed round: the leader's deadline decides.
            logger.debug("lease round failed: %s", exc)
            return False
        self.observed, self.observed_at = record, now
        self.last_renewed = now
        return True

    def acquire(self, stop: threading.Event) -> bool:
        """Block until this candidate leads (True) or ``stop`` is set (False)."""
        while not stop.is_set():
            if self.try_acquire_or_renew():
                logger.info("became the leader (%s)", self.identity)
                return True
            stop.wait(self.retry_period_s)
        return False

    def renew_round(self) -> bool:
        """Renew once; False when leadership is lost (no renewal for ``renew_deadline``)."""
        if self.last_renewed is None:
            return False
        if self.try_acquire_or_renew():
            return True
        if self.clock() - self.last_renewed >= self.renew_deadline_s:
            self.last_renewed = None
            return False
        return True

    def hold(self, stop: threading.Event, on_lost: Callable[[], None]) -> None:
        """Renew every ``retry_period`` until ``stop``; call ``on_lost`` when leadership ends."""
        while not stop.wait(self.retry_period_s):
            if not self.renew_round():
                logger.error("lost the leader lease (%s)", self.identity)
                on_lost()
                return

    def release(self) -> None:
        """Give the Lease up at a clean stop, so a standby takes over without waiting."""
        if self.last_renewed is None or self.observed is None:
            return
        self.last_renewed = None
        spec = {
            "holderIdentity": "",
            "leaseDurationSeconds": 1,
            "leaseTransitions": self.observed.transitions,
            "renewTime": micro_time(self.wall_clock()),
        }
        try:
            self.store.update(spec, self.observed.version)
        except ROUND_FAILURES as exc:
            logger.warning("could not release the leader lease: %s", exc)
