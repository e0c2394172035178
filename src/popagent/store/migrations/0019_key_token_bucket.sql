-- The per-key request rate as a token bucket on the key's row, replacing 0017's
-- fixed one-minute windows. Never edit this file after it has landed; add a new
-- numbered migration instead.
--
-- A fixed window let a key spend its whole minute in the first seconds, a burst
-- that slowed every other key. A bucket holds at most ``burst`` tokens, refills
-- at ``rate`` tokens a second, and a request takes one: a key may burst up to
-- the bucket, then runs at the rate (popagent.keys.RateLimit, docs/server.md).
--
-- Invariants:
--   * the bucket lives on the key's row and is read, refilled and spent by the
--     one statement that authenticates the key (store/keys.py), under the row's
--     lock: every server process (serve --workers) spends from the same bucket;
--   * rate_tokens NULL means a full bucket (a new key, or no limit configured);
--     rate_at is when rate_tokens was last computed.

ALTER TABLE popagent_api_keys
    DROP COLUMN window_started,
    DROP COLUMN window_count,
    ADD COLUMN rate_tokens double precision CHECK (rate_tokens >= 0),
    ADD COLUMN rate_at timestamptz;
