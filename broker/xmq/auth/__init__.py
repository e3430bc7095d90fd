"""xmq.auth: account stores behind the core's auth ports (`xmq.core.auth_ports`).

- `verifiers`, `saslprep`: password verifier strings and SCRAM-SHA-256 credentials (sans-IO)
- `scram`: the SCRAM-SHA-256 server and client state machines (sans-IO)
- `scram_exchange`: the `AuthExchange` for MQTT 5 enhanced authentication
- `acl`, `acl_patterns`: rules, `%u`/`%c` substitution, per-client cached decisions
- `login_guard`: rate limit of failed logins per user name and per source address
- `accounts`: the shared account model and password-login helpers
- `file_accounts`: the accounts file (`FileAccounts`)
- `postgres_schema`, `postgres_store`, `postgres_accounts`, `postgres_notify`,
  `postgres_admin`: accounts and ACLs in PostgreSQL (`PostgresAccounts`)

See docs/accounts.md.
"""
