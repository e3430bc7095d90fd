"""The connection's login state machine: one owner, explicit events, illegal moves refused.

``core.connection_states.next_state`` is the only way a ``ClientConnection`` changes state
(the flows report events through its methods): a transition the table does not list raises
instead of leaving a connection in a state nothing expects."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import xmq
from xmq.codec.packets import Connect
from xmq.core.auth_ports import AllowAll, AnonymousAuthenticator
from xmq.core.broker import Broker
from xmq.core.connection_states import (
    AUTHENTICATING,
    AWAIT_CONNECT,
    CLAIM_STARTED,
    CLAIMING,
    CLOSED,
    CONNECT_RECEIVED,
    CONNECTED,
    ENDED,
    LOGIN_ACCEPTED,
    IllegalTransition,
    next_state,
)
from xmq.core.session import Session
from xmq.core.settings import CoreSettings

from .test_login_eager import _conn


@pytest.mark.parametrize(
    ("state", "event", "after"),
    [
        (AWAIT_CONNECT, CONNECT_RECEIVED, AUTHENTICATING),
        (AUTHENTICATING, CLAIM_STARTED, CLAIMING),
        (AUTHENTICATING, LOGIN_ACCEPTED, CONNECTED),
        (CLAIMING, LOGIN_ACCEPTED, CONNECTED),
        (AWAIT_CONNECT, ENDED, CLOSED),
        (AUTHENTICATING, ENDED, CLOSED),
        (CLAIMING, ENDED, CLOSED),
        (CONNECTED, ENDED, CLOSED),
        (CLOSED, ENDED, CLOSED),
    ],
)
def test_the_login_transitions(state: int, event: int, after: int) -> None:
    assert next_state(state, event) == after


@pytest.mark.parametrize(
    ("state", "event"),
    [
        (AWAIT_CONNECT, LOGIN_ACCEPTED),  # accepted without a CONNECT
        (AWAIT_CONNECT, CLAIM_STARTED),
        (AUTHENTICATING, CONNECT_RECEIVED),  # a second CONNECT
        (CONNECTED, CONNECT_RECEIVED),
        (CONNECTED, LOGIN_ACCEPTED),  # accepted twice
        (CLAIMING, CLAIM_STARTED),
        (CLOSED, CONNECT_RECEIVED),
        (CLOSED, LOGIN_ACCEPTED),  # a login that finished after its connection ended
    ],
)
def test_any_other_transition_raises(state: int, event: int) -> None:
    with pytest.raises(IllegalTransition):
        next_state(state, event)


async def test_a_connection_refuses_an_event_its_state_does_not_allow() -> None:
    broker = Broker(CoreSettings())
    conn, _ = _conn(broker, AnonymousAuthenticator())
    with pytest.raises(IllegalTransition):
        conn.login_accepted(Session("a", broker.settings.queues, broker.stats), AllowAll(), None)
    assert conn.state == AWAIT_CONNECT and not broker.connections
    conn.handle(Connect(client_id="a", protocol_version=5))
    assert conn.state == CONNECTED and broker.connections == {conn}
    with pytest.raises(IllegalTransition):
        conn.claim_started()
    assert conn.state == CONNECTED and broker.stats.clients_connected == 1


def _state_assignments(path: Path) -> list[int]:
    """Lines of ``path`` that assign a ``state`` attribute of anything but ``self``."""
    lines: list[int] = []
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        lines.extend(
            target.lineno
            for target in targets
            if isinstance(target, ast.Attribute)
            and target.attr == "state"
            and not (isinstance(target.value, ast.Name) and target.value.id == "self")
        )
    return lines


def test_no_module_sets_a_state_from_outside_its_owner() -> None:
    package = Path(xmq.__file__).parent
    found = {
        str(path.relative_to(package)): lines
        for path in sorted(package.rglob("*.py"))
        if (lines := _state_assignments(path))
    }
    assert found == {}
