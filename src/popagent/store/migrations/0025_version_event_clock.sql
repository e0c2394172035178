-- A fact's earlier values keep their event clock.
-- Never edit this file after it has landed; add a new numbered migration instead.
--
-- Migration 0021 gave every memory the event clock (when what it tells happened or
-- since when it holds); a fact's earlier values (popagent_fact_versions, 0012) kept
-- none, so a superseded value forgot when it held, and restoring it read its clock
-- again from its words. Now a version keeps the clock its value had.
--
-- Invariants:
--   * the same four columns and check as popagent_memories' (0021): all NULL
--     (unknown), or start, end and precision set, the phrase optional;
--   * every path that writes a version copies the value's clock with it: the trigger
--     below (a changed value), and the delete and expiry statements of
--     store/memories.py (KEEP_GONE_FACTS); nothing is backfilled, so the versions
--     written before this migration keep an unknown clock.

ALTER TABLE popagent_fact_versions
    ADD COLUMN happened_start     timestamptz,
    ADD COLUMN happened_end       timestamptz,
    ADD COLUMN happened_precision text,
    ADD COLUMN happened_phrase    text,
    ADD CONSTRAINT popagent_fact_versions_event_clock CHECK (
        (happened_start IS NULL AND happened_end IS NULL AND happened_precision IS NULL
         AND happened_phrase IS NULL)
        OR (happened_start IS NOT NULL AND happened_end > happened_start
            AND happened_precision IN ('day', 'week', 'month', 'season', 'year')
            AND (happened_phrase IS NULL OR char_length(happened_phrase) BETWEEN 1 AND 200))
    );

-- 0012's function, now copying the replaced value's event clock too.
CREATE OR REPLACE FUNCTION popagent_facts_keep_version() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    INSERT INTO popagent_fact_versions
        (resource_id, fact_id, version, key, content, content_sha256, importance, expires_at,
         session_id, origin, turn_id, message_ids, tool_call_id, valid_from, valid_to,
         ended, ended_origin, ended_session_id,
         happened_start, happened_end, happened_precision, happened_phrase)
    VALUES
        (OLD.resource_id, OLD.id, OLD.version, OLD.key, OLD.content, OLD.content_sha256,
         OLD.importance, OLD.expires_at, OLD.session_id, OLD.origin, OLD.turn_id,
         OLD.message_ids, OLD.tool_call_id, OLD.updated_at, NEW.updated_at,
         'updated', NEW.origin, NEW.session_id,
         OLD.happened_start, OLD.happened_end, OLD.happened_precision, OLD.happened_phrase);
    -- A change written by other SQL (an operator's UPDATE) is numbered here.
    IF NEW.version = OLD.version THEN
        UPDATE popagent_memories SET version = OLD.version + 1
        WHERE resource_id = NEW.resource_id AND id = NEW.id;
    END IF;
    RETURN NULL;
END
$fn$;
