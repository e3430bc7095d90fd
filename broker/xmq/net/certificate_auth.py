"""Client-certificate logins: the verified certificate's Common Name becomes the user name."""

from __future__ import annotations

from xmq.core.auth_ports import AUTH_SUCCESS, AuthDecision, Authenticator, AuthExchange, Credentials


class CertificateUserAuthenticator:
    """Per connection: accepts the client as its certificate's CN (the handshake verified it).

    Used only on listeners with ``cn_as_username`` when the client presented a certificate;
    ACLs are then loaded for that user name as for any other login.
    """

    __slots__ = ("common_name", "inner")

    def __init__(self, inner: Authenticator, common_name: str) -> None:
        self.inner = inner
        self.common_name = common_name

    async def authenticate(self, credentials: Credentials) -> AuthDecision:
        return AuthDecision(AUTH_SUCCESS, username=self.common_name)

    def start_exchange(self, method: str, credentials: Credentials) -> AuthExchange | None:
        return self.inner.start_exchange(method, credentials)
