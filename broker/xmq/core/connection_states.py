"""The states of a client connection (``ClientConnection.state``).

``AWAIT_CONNECT`` until the CONNECT arrives, ``AUTHENTICATING`` while the authenticator decides
(``login_flow``), ``CONNECTED`` from the CONNACK on, ``CLOSED`` for good after a refusal, a
disconnection or the loss of the network connection.
"""

AWAIT_CONNECT, AUTHENTICATING, CONNECTED, CLOSED = range(4)
