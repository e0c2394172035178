-- popagent_secrets: credentials the agent may use but must never remember.
-- Never edit this file after it has landed; add a new numbered migration instead.
--
-- This is a store apart from memory, with its own retention: rows leave only by
-- an explicit delete or by the secret store's purge of expired rows. Long-term
-- memory cleanup and maintenance, and session deletion, never touch this table
-- (there is deliberately no foreign key to popagent_sessions or popagent_memories).
--
-- Values are stored only as AES-256-GCM ciphertext. The associated data binds
-- each ciphertext to its (resource_id, name), so a ciphertext copied to another
-- row fails to decrypt; key_id fingerprints the key that sealed it, so a wrong
-- key is reported as such rather than as corruption.

CREATE TABLE popagent_secrets (
    resource_id  text NOT NULL CHECK (resource_id <> '' AND char_length(resource_id) <= 256),
    name         text NOT NULL CHECK (name ~ '^[A-Za-z][A-Za-z0-9_.-]{0,63}$'),
    ciphertext   bytea NOT NULL,
    -- A fresh random 96-bit nonce per encryption: never reused under one key.
    nonce        bytea NOT NULL CHECK (octet_length(nonce) = 12),
    key_id       text NOT NULL CHECK (key_id ~ '^[0-9a-f]{16}$'),
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    expires_at   timestamptz,
    PRIMARY KEY (resource_id, name)
);

-- The purge of expired secrets runs across all resources; only rows with a TTL
-- can ever expire, so only they are indexed.
CREATE INDEX popagent_secrets_expires_idx
    ON popagent_secrets (expires_at)
    WHERE expires_at IS NOT NULL;
