"""Accounts from a local YAML file: the embedded account store without a database.

allow_anonymous: false        # clients without a user name (group "anonymous")
acl_no_match: deny            # decision when no rule matches (with an `acl` section)
users:
  alice:
    password: "pbkdf2-sha256$i=600000$<salt>$<hash>"    # verifier, never clear text
    scram: "SCRAM-SHA-256$4096:<salt>$<StoredKey>:<ServerKey>"   # optional
    enabled: true
    groups: [sensors]         # every user is also in group "default"
acl:                          # absent: everything allowed except writing `$` topics
  - {permission: allow, action: both, topic: "devices/%u/#", priority: 10}
  - {permission: deny, action: publish, topic: "devices/+/config", group: sensors}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from xmq.auth.accounts import (
    ANONYMOUS_GROUP,
    AccountRecord,
    TimingShield,
    VerifiedPasswords,
    bad_credentials,
    busy_decision,
    decision_for,
    with_default_group,
)
from xmq.auth.acl import AclRule, Action, Permission, RuleAcl
from xmq.auth.acl_patterns import PatternError
from xmq.auth.hash_pool import HashPool, HashPoolBusyError
from xmq.auth.login_guard import LoginGuard
from xmq.auth.scram_exchange import start_scram_exchange
from xmq.auth.verifiers import HashPolicy, ScramCredentials, VerifierError, parse_verifier
from xmq.core.auth_ports import (
    AUTH_CONNECTION_RATE_EXCEEDED,
    AUTH_NOT_AUTHORIZED,
    AUTH_SUCCESS,
    AllowAll,
    AuthDecision,
    AuthEvents,
    AuthExchange,
    ClientAcl,
    Credentials,
)


class AccountsFileError(ValueError):
    """The accounts file cannot be read or is invalid."""


class _UserEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    password: str | None = None
    scram: str | None = None
    enabled: bool = True
    groups: list[str] = Field(default_factory=list)

    @field_validator("password")
    @classmethod
    def _check_verifier(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                parse_verifier(value)
            except VerifierError as exc:
                raise ValueError(f"password must be a verifier string: {exc}") from exc
        return value


class _RuleEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    permission: Literal["allow", "deny"]
    action: Literal["publish", "subscribe", "both"]
    topic: str
    priority: int = 0
    max_qos: int | None = Field(default=None, ge=0, le=2)
    retain: bool | None = None
    user: str | None = None
    group: str | None = None


class _AccountsFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    allow_anonymous: bool = False
    acl_no_match: Literal["allow", "deny"] = "deny"
    users: dict[str, _UserEntry] = Field(default_factory=dict)
    acl: list[_RuleEntry] | None = None


def _records(parsed: _AccountsFile) -> dict[str, AccountRecord]:
    records: dict[str, AccountRecord] = {}
    for username, entry in parsed.users.items():
        try:
            scram = ScramCredentials.decode(entry.scram) if entry.scram else None
        except VerifierError as exc:
            raise AccountsFileError(f"user {username!r}: bad scram credentials: {exc}") from exc
        records[username] = AccountRecord(
            username=username,
            verifier=entry.password,
            scram=scram,
            enabled=entry.enabled,
            groups=with_default_group(entry.groups),
        )
    return records


def _rules(parsed: _AccountsFile) -> tuple[AclRule, ...] | None:
    if parsed.acl is None:
        return None
    rules: list[AclRule] = []
    for index, entry in enumerate(parsed.acl):
        try:
            rules.append(
                AclRule(
                    permission=Permission(entry.permission),
                    action=Action(entry.action),
                    topic_filter=entry.topic,
                    priority=entry.priority,
                    max_qos=entry.max_qos,
                    retain=entry.retain,
                    username=entry.user,
                    group=entry.group,
                    rule_id=index,
                )
            )
        except (PatternError, ValueError) as exc:
            raise AccountsFileError(f"acl rule {index}: {exc}") from exc
    return tuple(rules)


def parse_accounts(data: Any) -> _AccountsFile:
    try:
        return _AccountsFile.model_validate(data if data is not None else {})
    except ValidationError as exc:
        raise AccountsFileError(str(exc)) from exc


class FileAccounts:
    """Authenticator + Authorizer over an accounts file (password and SCRAM-SHA-256)."""

    def __init__(
        self,
        data: Any,
        *,
        guard: LoginGuard | None = None,
        path: Path | None = None,
        allow_anonymous: bool | None = None,
        hash_policy: HashPolicy | None = None,
        hash_pool: HashPool | None = None,
    ) -> None:
        """`allow_anonymous`, when given, overrides the file's setting; `hash_policy` is the
        cost an unknown user name is made to spend (like a real verification); `hash_pool`
        runs the slow hashes (default: one serving addresses without failed logins first)."""
        self.path = path
        self._anonymous_override = allow_anonymous
        self.guard = guard if guard is not None else LoginGuard()
        pool = hash_pool or HashPool(self.guard.address_rank)
        self._shield = TimingShield(hash_policy or HashPolicy(), pool)
        self._verified = VerifiedPasswords()
        self._apply(parse_accounts(data))

    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        guard: LoginGuard | None = None,
        allow_anonymous: bool | None = None,
        hash_policy: HashPolicy | None = None,
    ) -> FileAccounts:
        path = Path(path)
        return cls(
            _read(path),
            guard=guard,
            path=path,
            allow_anonymous=allow_anonymous,
            hash_policy=hash_policy,
        )

    def _apply(self, parsed: _AccountsFile) -> None:
        override = self._anonymous_override
        self.allow_anonymous = parsed.allow_anonymous if override is None else override
        self._no_match_allows = parsed.acl_no_match == "allow"
        self._records = _records(parsed)
        self._rules = _rules(parsed)

    def reload(self, events: AuthEvents | None = None) -> None:
        """Re-read the file; revoke users that disappeared or were disabled (0x87) and
        report changed rules to `events`."""
        if self.path is None:
            raise AccountsFileError("accounts were not loaded from a file")
        old_records, old_rules = self._records, self._rules
        self._apply(parse_accounts(_read(self.path)))
        self._verified.clear()
        if events is None:
            return
        for username, record in old_records.items():
            new = self._records.get(username)
            if new is None or (record.enabled and not new.enabled):
                events.revoke(username, AUTH_NOT_AUTHORIZED)
            elif new.groups != record.groups:
                events.acl_changed(username)
        if old_rules != self._rules:
            events.acl_changed(None)

    async def lookup(self, username: str) -> AccountRecord | None:
        return self._records.get(username)

    async def authenticate(self, credentials: Credentials) -> AuthDecision:
        username, password = credentials.username, credentials.password
        if username is None:
            if self.allow_anonymous and password is None:
                return AuthDecision(AUTH_SUCCESS, groups=(ANONYMOUS_GROUP,))
            return bad_credentials("a user name is required")
        if not self.guard.allowed(username, credentials.peer):
            return AuthDecision(
                AUTH_CONNECTION_RATE_EXCEEDED, reason_string="too many failed logins"
            )
        record = self._records.get(username)
        verifier = record.verifier if record is not None else None
        try:
            if record is None or verifier is None or password is None:
                if password is not None:
                    await self._shield.spend(password, credentials.peer)
                self.guard.record_failure(username, credentials.peer)
                return bad_credentials()
            if not self._verified.check(username, verifier, password):
                if not await self._shield.verify(credentials.peer, password, verifier):
                    self.guard.record_failure(username, credentials.peer)
                    return bad_credentials()
                self._verified.remember(username, verifier, password)
        except HashPoolBusyError as error:
            return busy_decision(error)
        self.guard.record_success(username, credentials.peer)
        return decision_for(record)

    def start_exchange(self, method: str, credentials: Credentials) -> AuthExchange | None:
        return start_scram_exchange(method, credentials, self.lookup, self.guard)

    async def acl_for(self, decision: AuthDecision, client_id: str) -> ClientAcl:
        if self._rules is None:
            return AllowAll()
        # Groups come from the account itself: the core may pass a bare decision on reload.
        groups: tuple[str, ...] = (ANONYMOUS_GROUP,)
        if decision.username is not None:
            record = self._records.get(decision.username)
            groups = record.groups if record is not None else decision.groups
        return RuleAcl(
            self._rules,
            username=decision.username,
            groups=groups,
            client_id=client_id,
            no_match_allows=self._no_match_allows,
        )


def _read(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise AccountsFileError(f"cannot read accounts file {path}: {exc}") from exc
