"""The states of a client connection (``ClientConnection.state``) and the events that move it.

``AWAIT_CONNECT`` until the CONNECT arrives, ``AUTHENTICATING`` while the authenticator decides
(``login_flow``: the password check, an enhanced-authentication exchange), ``CLAIMING`` while an
authenticated client's session is claimed cluster-wide, ``CONNECTED`` from the CONNACK on,
``CLOSED`` for good after a refusal, a disconnection or the loss of the network connection.

The connect deadline (``listeners.connect_timeout_s``) covers ``AWAIT_CONNECT`` and
``AUTHENTICATING``, everything the client controls; ``CLAIMING`` is bounded by the claim itself
(the lease TTL + 2 s, then 0x88).

Only ``ClientConnection`` changes its state, and only through ``next_state`` (the h11 model:
one owner, explicit events, a transition the table does not list is a bug that raises):
``login_flow`` tells it what happened (``login_started``, ``claim_started``,
``login_accepted``, ``login_refused``) and never sets the state itself.
"""

from typing import Final

# ``Final`` literals: compiled code (the client protocol reads ``CONNECTED`` on every read)
# inlines them instead of looking a module global up in a dict
AWAIT_CONNECT: Final = 0
AUTHENTICATING: Final = 1
CONNECTED: Final = 2
CLOSED: Final = 3
CLAIMING: Final = 4

CONNECT_RECEIVED: Final = 0
CLAIM_STARTED: Final = 1
LOGIN_ACCEPTED: Final = 2
ENDED: Final = 3
"""The events: a CONNECT was negotiated, the cluster-wide claim started, the login was
accepted (the CONNACK goes out), the connection ended (refused, disconnected, lost)."""

STATE_NAMES = ("AWAIT_CONNECT", "AUTHENTICATING", "CONNECTED", "CLOSED", "CLAIMING")
EVENT_NAMES = ("CONNECT_RECEIVED", "CLAIM_STARTED", "LOGIN_ACCEPTED", "ENDED")

_TRANSITIONS: dict[tuple[int, int], int] = {
    (AWAIT_CONNECT, CONNECT_RECEIVED): AUTHENTICATING,
    (AUTHENTICATING, CLAIM_STARTED): CLAIMING,
    (AUTHENTICATING, LOGIN_ACCEPTED): CONNECTED,
    (CLAIMING, LOGIN_ACCEPTED): CONNECTED,
    (AWAIT_CONNECT, ENDED): CLOSED,
    (AUTHENTICATING, ENDED): CLOSED,
    (CLAIMING, ENDED): CLOSED,
    (CONNECTED, ENDED): CLOSED,
    (CLOSED, ENDED): CLOSED,  # a connection lost after its refusal or DISCONNECT
}

EVENTS: Final = 4
"""How many events there are (a literal: compiled code inlines it)."""
assert len(EVENT_NAMES) == EVENTS
NEXT_STATE: tuple[int, ...] = tuple(
    _TRANSITIONS.get((state, event), -1)
    for state in range(len(STATE_NAMES))
    for event in range(EVENTS)
)
"""The same table flat, indexed by ``state * EVENTS + event`` (-1: not allowed): what
``ClientConnection`` reads on the login path (no call, no key tuple per transition)."""


class IllegalTransition(RuntimeError):  # noqa: N818 - named after what it reports
    """An event that the connection's state does not allow (a bug in a flow, never input)."""

    def __init__(self, state: int, event: int) -> None:
        super().__init__(f"{EVENT_NAMES[event]} in state {STATE_NAMES[state]}")
        self.state = state
        self.event = event


def next_state(state: int, event: int) -> int:
    """The state after ``event`` in ``state``; raises ``IllegalTransition`` for any other."""
    after = NEXT_STATE[state * EVENTS + event]
    if after < 0:
        raise IllegalTransition(state, event)
    return after
