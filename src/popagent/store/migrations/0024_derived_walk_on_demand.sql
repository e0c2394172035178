-- A changed or deleted memory walks its dependents only when it has one.
-- Never edit this file after it has landed; add a new numbered migration instead.
--
-- 0022's row triggers ran popagent_mark_derived_stale (a recursive walk and an
-- UPDATE) for every memory changed or deleted, although most resources have no
-- derived memory and most memories are nobody's source: a cleanup of 10,000
-- episodes ran the walk 10,000 times, and took about three times as long as
-- before 0022 (bench/writes.py). The walk's first step, the memories based on
-- the source itself, is now looked up on its own first, through the partial
-- index of derived memories (popagent_memories_derived_idx, empty for most
-- resources); the walk runs only when that finds one. When the first step finds
-- nothing the walk marks nothing, so the same memories are marked as before, in
-- the same transaction (0022's invariants are unchanged).

-- Whether any memory of p_resource is based on the source (p_key, p_id) itself:
-- the seed of popagent_mark_derived_stale's walk, with the same conditions. In
-- PL/pgSQL, whose statements keep their plans for the session (a SQL function
-- whose body holds a subquery is not inlined).
CREATE FUNCTION popagent_has_dependents(p_resource text, p_key text, p_id bigint)
RETURNS boolean LANGUAGE plpgsql STABLE AS $fn$
BEGIN
    RETURN EXISTS (
        SELECT 1 FROM popagent_memories m
        WHERE m.resource_id = p_resource AND m.based_on IS NOT NULL
          AND (m.based_on @> jsonb_build_array(p_id)
               OR (p_key IS NOT NULL AND m.based_on @> jsonb_build_array(p_key))));
END
$fn$;

CREATE OR REPLACE FUNCTION popagent_source_changed() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF popagent_has_dependents(OLD.resource_id, OLD.key, OLD.id) THEN
        PERFORM popagent_mark_derived_stale(OLD.resource_id, OLD.key, OLD.id, NEW.updated_at);
    END IF;
    RETURN NULL;
END
$fn$;

CREATE OR REPLACE FUNCTION popagent_source_gone() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF popagent_has_dependents(OLD.resource_id, OLD.key, OLD.id) THEN
        PERFORM popagent_mark_derived_stale(
            OLD.resource_id, OLD.key, OLD.id, least(OLD.expires_at, now()));
    END IF;
    RETURN NULL;
END
$fn$;
