-- Fact versions, provenance and expiry.
-- Never edit this file after it has landed; add a new numbered migration instead.
--
-- Invariants:
--   * popagent_memories holds current rows only: recall, rendering and listing
--     read it alone, and its two unique indexes (one fact per key, one keyless
--     memory per content hash) keep constraining exactly the current rows;
--   * every change of a fact's value (content, key, importance, expiry) copies
--     the value it replaces into popagent_fact_versions, by the trigger below,
--     whatever path made the change (remember, the API, the GUI, MCP, the CLI);
--     deleting a fact or its expiry copies its last value there too (the
--     statements in store/memories.py), unless it is purged;
--   * a version is the value a fact had from valid_from until valid_to, with
--     the provenance of whoever wrote it, and how it ended (updated, deleted,
--     expired) with the origin and session that ended it;
--   * provenance never names a secret and never holds content: an origin
--     (library, agent, turn, api, gui, cli, mcp, import or an adapter's name),
--     the session and turn, the source message ids and the tool call id.

ALTER TABLE popagent_memories
    ADD COLUMN origin       text NOT NULL DEFAULT 'library'
                            CHECK (origin ~ '^[a-z][a-z0-9-]{0,31}$'),
    -- The turn and messages a memory came from. No foreign keys: long-term
    -- memory outlives the sessions it came from (deleting a session never
    -- deletes a memory), so these are a record, not a reference.
    ADD COLUMN turn_id      bigint CHECK (turn_id > 0),
    ADD COLUMN message_ids  bigint[] CHECK (cardinality(message_ids) BETWEEN 1 AND 64),
    ADD COLUMN tool_call_id text CHECK (tool_call_id <> '' AND char_length(tool_call_id) <= 256),
    ADD COLUMN expires_at   timestamptz,
    ADD COLUMN version      integer NOT NULL DEFAULT 1 CHECK (version >= 1),
    ADD CONSTRAINT popagent_memories_expiry_on_facts CHECK (kind = 'fact' OR expires_at IS NULL);

-- Maintenance's expiry sweep.
CREATE INDEX popagent_memories_expires_idx
    ON popagent_memories (expires_at)
    WHERE expires_at IS NOT NULL;

CREATE TABLE popagent_fact_versions (
    resource_id     text NOT NULL,
    fact_id         bigint NOT NULL,
    version         integer NOT NULL CHECK (version >= 1),
    key             text,
    content         text NOT NULL CHECK (content <> ''),
    content_sha256  text NOT NULL CHECK (content_sha256 ~ '^[0-9a-f]{64}$'),
    importance      double precision NOT NULL CHECK (importance >= 0 AND importance <= 1),
    expires_at      timestamptz,
    -- Who wrote this value.
    session_id      text,
    origin          text NOT NULL,
    turn_id         bigint,
    message_ids     bigint[],
    tool_call_id    text,
    valid_from      timestamptz NOT NULL,
    valid_to        timestamptz NOT NULL,
    -- How and by whom it stopped being current.
    ended           text NOT NULL CHECK (ended IN ('updated', 'deleted', 'expired')),
    ended_origin    text NOT NULL CHECK (ended_origin ~ '^[a-z][a-z0-9-]{0,31}$'),
    ended_session_id text,
    -- Led by the resource, like every key (distributable by resource_id). No
    -- foreign key to the fact: the history of a deleted fact is kept (and can
    -- be restored) until it is purged.
    PRIMARY KEY (resource_id, fact_id, version)
);

-- The writes of one session (the GUI's "writes of this session").
CREATE INDEX popagent_fact_versions_ended_session_idx
    ON popagent_fact_versions (resource_id, ended_session_id)
    WHERE ended_session_id IS NOT NULL;

CREATE INDEX popagent_memories_session_idx
    ON popagent_memories (resource_id, session_id)
    WHERE session_id IS NOT NULL;

-- The value a change replaces becomes a version. The writing statement sets
-- the next version number itself (store/memories.py): a BEFORE ROW UPDATE
-- trigger, even one limited to these columns, would make every other update of
-- the table (recall's access bookkeeping) re-fetch and re-lock its rows. A
-- change written by other SQL, which does not advance the number, is numbered
-- by the trigger itself.
CREATE FUNCTION popagent_facts_keep_version() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    INSERT INTO popagent_fact_versions
        (resource_id, fact_id, version, key, content, content_sha256, importance, expires_at,
         session_id, origin, turn_id, message_ids, tool_call_id, valid_from, valid_to,
         ended, ended_origin, ended_session_id)
    VALUES
        (OLD.resource_id, OLD.id, OLD.version, OLD.key, OLD.content, OLD.content_sha256,
         OLD.importance, OLD.expires_at, OLD.session_id, OLD.origin, OLD.turn_id,
         OLD.message_ids, OLD.tool_call_id, OLD.updated_at, NEW.updated_at,
         'updated', NEW.origin, NEW.session_id);
    -- A change written by other SQL (an operator's UPDATE) is numbered here.
    IF NEW.version = OLD.version THEN
        UPDATE popagent_memories SET version = OLD.version + 1
        WHERE resource_id = NEW.resource_id AND id = NEW.id;
    END IF;
    RETURN NULL;
END
$fn$;

CREATE TRIGGER popagent_facts_keep_version
    AFTER UPDATE OF content, key, importance, expires_at ON popagent_memories
    FOR EACH ROW
    WHEN (OLD.kind = 'fact'
          AND (OLD.content, OLD.key, OLD.importance, OLD.expires_at)
              IS DISTINCT FROM (NEW.content, NEW.key, NEW.importance, NEW.expires_at))
    EXECUTE FUNCTION popagent_facts_keep_version();
