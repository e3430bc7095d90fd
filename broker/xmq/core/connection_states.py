"""The states of a client connection (``ClientConnection.state``).

``AWAIT_CONNECT`` until the CONNECT arrives, ``AUTHENTICATING`` while the authenticator decides
(``login_flow``: the password check, an enhanced-authentication exchange), ``CLAIMING`` while an
authenticated client's session is claimed cluster-wide, ``CONNECTED`` from the CONNACK on,
``CLOSED`` for good after a refusal, a disconnection or the loss of the network connection.

The connect deadline (``listeners.connect_timeout_s``) covers ``AWAIT_CONNECT`` and
``AUTHENTICATING``, everything the client controls; ``CLAIMING`` is bounded by the claim itself
(the lease TTL + 2 s, then 0x88).
"""

AWAIT_CONNECT, AUTHENTICATING, CONNECTED, CLOSED, CLAIMING = range(5)
