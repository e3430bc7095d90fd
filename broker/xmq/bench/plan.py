"""What the runner hands each worker process, and what workers report back (all picklable)."""

from __future__ import annotations

from dataclasses import dataclass, field

from xmq.bench.accounting import TrackerSnapshot


@dataclass(frozen=True, slots=True)
class SubscriberSpec:
    client_id: str
    filters: tuple[str, ...]
    receiver: int
    """Accounting key: the subscriber itself, or its shared-subscription group."""
    node: int = 0
    """Index into ``WorkerPlan.nodes`` (cluster runs spread clients over the nodes)."""


@dataclass(frozen=True, slots=True)
class PublisherSpec:
    client_id: str
    topic: str
    publisher_id: int
    node: int = 0


@dataclass(frozen=True, slots=True)
class Target:
    """Where the broker listens; ``label`` names it in reports (``xmq``, ``mosquitto``)."""

    host: str
    port: int
    label: str = "broker"


@dataclass(frozen=True, slots=True)
class WorkerPlan:
    worker_index: int
    target: Target
    source_addresses: tuple[str, ...]
    protocol: int
    qos: int
    keepalive: int
    subscribers: tuple[SubscriberSpec, ...] = ()
    publishers: tuple[PublisherSpec, ...] = ()
    idle_clients: tuple[str, ...] = ()
    """Clients that only connect and hold (``connections`` scenario)."""
    rate_per_publisher: float = 0.0
    messages_per_publisher: int = 0
    connect_rate: float = 2000.0
    """Connections per second this worker opens (scheduled, not bursts)."""
    interval_s: float = 1.0
    connect_timeout_s: float = 30.0
    session_expiry: int = 0
    nodes: tuple[Target, ...] = ()
    """Every node of a cluster run (empty: ``target`` only)."""
    worker_count: int = 1

    def node_target(self, node: int) -> Target:
        return self.nodes[node % len(self.nodes)] if self.nodes else self.target


@dataclass(slots=True)
class ConnectStats:
    """Connect latencies (CONNECT written -> CONNACK read) of one worker, in microseconds."""

    attempted: int = 0
    connected: int = 0
    failed: int = 0
    refused: int = 0
    latencies_us: list[int] = field(default_factory=list)
    first_error: str = ""
    elapsed_s: float = 0.0


@dataclass(slots=True)
class Ready:
    worker_index: int
    connect: ConnectStats
    receive_maximum: int


@dataclass(slots=True)
class IntervalReport:
    """One worker's counts for interval ``index`` (``[t0 + index*I, t0 + (index+1)*I)``)."""

    worker_index: int
    index: int
    sent: int
    delivered: int
    duplicates: int
    hist: dict[int, int]
    lat_total: int
    lat_sum_us: int
    lat_max_us: int
    send_lag_max_us: int
    held_back: int
    cpu_s: float
    connections: int
    connection_losses: int
    wall_s: float = 0.0
    """Wall time the report covers (a saturated worker reports late: over one interval)."""


@dataclass(slots=True)
class FinalReport:
    worker_index: int
    sent: dict[int, int]
    trackers: dict[tuple[int, int], TrackerSnapshot]
    cpu_s: float
    connection_losses: int
    disconnect_reasons: dict[int, int]
    publishing_done_s: float
    """When this worker's last scheduled message went out, seconds after t0."""
    last_connect_s: float = 0.0
    """When this worker's last idle client got its CONNACK, seconds after t0."""


@dataclass(slots=True)
class WorkerFailed:
    worker_index: int
    error: str


@dataclass(frozen=True, slots=True)
class Start:
    t0_ns: int


@dataclass(frozen=True, slots=True)
class Stop:
    """Stop publishing (if still going), send the final report, disconnect and exit."""


WorkerMessage = Ready | IntervalReport | FinalReport | WorkerFailed
