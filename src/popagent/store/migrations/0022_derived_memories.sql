-- Derived memories: what a memory was based on, and the mark it gets when that changes.
-- Never edit this file after it has landed; add a new numbered migration instead.
--
-- Invariants:
--   * based_on is NULL (based on nothing) or a JSON array of 1 to 16 sources, each
--     a fact key (a JSON string) or a memory id (a JSON number); the library checks
--     them (they exist in the resource, no cycle) before it writes;
--   * when a source changes (its content or key), or goes (deleted, expired, purged),
--     every memory of the same resource based on it, and on those in turn, is
--     marked stale: stale_since says when the source changed, stale_source names it
--     (its key, or '#' and its id when it has none). The triggers below do it,
--     whatever path made the change, in the same transaction;
--   * a mark is never a deletion: the dependent stays until someone confirms it
--     (which clears the mark) or forgets it. Changing the dependent's own value
--     clears its mark too (the writes of store/memories.py);
--   * every statement names the resource (row-level triggers only, no transition
--     tables: Citus runs these on the resource's shard).

ALTER TABLE popagent_memories
    ADD COLUMN based_on     jsonb CHECK (jsonb_typeof(based_on) = 'array'
                                         AND jsonb_array_length(based_on) BETWEEN 1 AND 16),
    ADD COLUMN stale_since  timestamptz,
    ADD COLUMN stale_source text CHECK (char_length(stale_source) BETWEEN 1 AND 160),
    ADD CONSTRAINT popagent_memories_stale_whole
        CHECK ((stale_since IS NULL) = (stale_source IS NULL));

-- The derived memories of a resource (few), read by the triggers on each change.
CREATE INDEX popagent_memories_derived_idx
    ON popagent_memories (resource_id)
    WHERE based_on IS NOT NULL;

-- The stale memories of a resource (the GUI's list, `popagent facts stale`).
CREATE INDEX popagent_memories_stale_idx
    ON popagent_memories (resource_id, stale_since)
    WHERE stale_since IS NOT NULL;

-- Mark every memory of p_resource based on the source (p_key, p_id), directly or
-- through other derived memories. UNION (not UNION ALL) ends the walk even if a
-- cycle slipped past the write's check.
CREATE FUNCTION popagent_mark_derived_stale(
    p_resource text, p_key text, p_id bigint, p_changed timestamptz
) RETURNS void LANGUAGE sql AS $fn$
WITH RECURSIVE derived(id, key) AS (
    SELECT m.id, m.key FROM popagent_memories m
    WHERE m.resource_id = p_resource AND m.based_on IS NOT NULL
      AND (m.based_on @> jsonb_build_array(p_id)
           OR (p_key IS NOT NULL AND m.based_on @> jsonb_build_array(p_key)))
    UNION
    SELECT m.id, m.key FROM derived d
    JOIN popagent_memories m
      ON m.resource_id = p_resource AND m.based_on IS NOT NULL
     AND (m.based_on @> jsonb_build_array(d.id)
          OR (d.key IS NOT NULL AND m.based_on @> jsonb_build_array(d.key)))
)
UPDATE popagent_memories m
SET stale_since = p_changed, stale_source = coalesce(p_key, '#' || p_id::text)
FROM derived d
WHERE m.resource_id = p_resource AND m.id = d.id AND m.id <> p_id
$fn$;

CREATE FUNCTION popagent_source_changed() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM popagent_mark_derived_stale(OLD.resource_id, OLD.key, OLD.id, NEW.updated_at);
    RETURN NULL;
END
$fn$;

CREATE TRIGGER popagent_source_changed
    AFTER UPDATE OF content, key ON popagent_memories
    FOR EACH ROW
    WHEN ((OLD.content, OLD.key) IS DISTINCT FROM (NEW.content, NEW.key))
    EXECUTE FUNCTION popagent_source_changed();

-- A source that expired changed when it expired; one deleted or purged, now
-- (least() skips a NULL expiry).
CREATE FUNCTION popagent_source_gone() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM popagent_mark_derived_stale(
        OLD.resource_id, OLD.key, OLD.id, least(OLD.expires_at, now()));
    RETURN NULL;
END
$fn$;

CREATE TRIGGER popagent_source_gone
    AFTER DELETE ON popagent_memories
    FOR EACH ROW
    EXECUTE FUNCTION popagent_source_gone();
