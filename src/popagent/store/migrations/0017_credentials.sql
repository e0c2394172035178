-- Credentials of a server: API keys per resource, GUI login sessions, failed-login
-- counters and the access audit. Never edit this file after it has landed; add a
-- new numbered migration instead.
--
-- Invariants:
--   * no secret is stored: a key and a login's cookie are random values of which
--     only the SHA-256 is kept (a key has 256 bits of entropy, so a slow hash adds
--     nothing); a stolen table does not let anyone in;
--   * these are the tables a request is authenticated against before its
--     resource is known, so their lookups are by hash, not by resource: in a
--     Citus cluster they are reference tables (docs/scaling.md), and row-level
--     security on resource_id does not apply to them;
--   * every server process reads them on every request that presents a key or a
--     login cookie: revoking a key, or logging out, takes effect at once in every
--     process (serve --workers), with no cache to expire;
--   * the audit has no free-text column: events, ids, scopes, reasons from a
--     fixed list and counts, never memory content or a credential.

CREATE TABLE popagent_api_keys (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    resource_id  text NOT NULL CHECK (resource_id <> '' AND char_length(resource_id) <= 256),
    name         text NOT NULL CHECK (name <> '' AND char_length(name) <= 100),
    scope        text NOT NULL CHECK (scope IN ('read', 'write', 'admin')),
    key_sha256   bytea NOT NULL UNIQUE CHECK (octet_length(key_sha256) = 32),
    -- The key's first characters, shown in lists so that a person can tell keys apart.
    prefix       text NOT NULL CHECK (char_length(prefix) <= 16),
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz,
    last_used_at timestamptz,
    use_count    bigint NOT NULL DEFAULT 0,
    revoked_at   timestamptz,
    -- The per-key request rate, a token bucket on the key's own row (a burst of one
    -- key waits on that row, never on another's): at most ``burst`` tokens, refilled
    -- at ``rate`` a second, one per request (popagent.keys.RateLimit). It is read,
    -- refilled and spent by the one statement that authenticates the key
    -- (store/keys.py), under the row's lock, so every server process spends from
    -- the same bucket. rate_tokens NULL: a full bucket (a new key, or no limit
    -- configured); rate_at: when rate_tokens was last computed. (A fixed one-minute
    -- window let a key spend its whole minute in the first seconds.)
    rate_tokens  double precision CHECK (rate_tokens >= 0),
    rate_at      timestamptz
);

-- ``keys list`` per resource; names are unique among a resource's live keys.
CREATE INDEX popagent_api_keys_resource_idx ON popagent_api_keys (resource_id, id);
CREATE UNIQUE INDEX popagent_api_keys_live_name_idx
    ON popagent_api_keys (resource_id, name) WHERE revoked_at IS NULL;

CREATE TABLE popagent_logins (
    login_sha256 bytea PRIMARY KEY CHECK (octet_length(login_sha256) = 32),
    -- NULL for the operator's login in multi-resource mode (it reads no memory).
    resource_id  text CHECK (resource_id <> '' AND char_length(resource_id) <= 256),
    -- The key logged in with; NULL when it was the server's token. Deleting or
    -- revoking the key ends its logins (the lookup joins on it).
    key_id       bigint REFERENCES popagent_api_keys (id) ON DELETE CASCADE,
    scope        text NOT NULL CHECK (scope IN ('read', 'write', 'admin', 'operator')),
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL
);

CREATE INDEX popagent_logins_expires_idx ON popagent_logins (expires_at);
CREATE INDEX popagent_logins_key_idx ON popagent_logins (key_id) WHERE key_id IS NOT NULL;

-- Failed logins per client address, in fixed windows: shared by every process.
CREATE TABLE popagent_login_failures (
    client         text PRIMARY KEY CHECK (char_length(client) <= 64),
    window_started timestamptz NOT NULL,
    failures       integer NOT NULL CHECK (failures >= 0)
);

CREATE TABLE popagent_access_audit (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    event       text NOT NULL CHECK (event IN ('key_created', 'key_revoked', 'login',
                                               'logout', 'login_failed', 'refused')),
    resource_id text CHECK (char_length(resource_id) <= 256),
    key_id      bigint,
    scope       text CHECK (scope IN ('read', 'write', 'admin', 'operator')),
    -- Why a request was refused, from a fixed list (never the request's content).
    reason      text CHECK (reason IN ('unknown_credential', 'expired', 'revoked',
                                       'scope', 'operator_reads_no_memory', 'rate_limited',
                                       'quota')),
    method      text CHECK (char_length(method) <= 16),
    -- The route's path template's first segments only (``/api/facts``), never a query.
    path        text CHECK (char_length(path) <= 200)
);

CREATE INDEX popagent_access_audit_resource_idx ON popagent_access_audit (resource_id, id DESC);
