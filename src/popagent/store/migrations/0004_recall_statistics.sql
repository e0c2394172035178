-- Recall statistics: what BM25 needs to know of a resource, kept current by triggers.
-- Never edit this file after it has landed; add a new numbered migration instead.
--
-- Counting a lexeme's documents at recall time visits every matching heap row
-- (GIN has no index-only scans), which grows with the resource. These two tables
-- hold the counts instead, so recall reads them with a few primary-key lookups:
--
--   popagent_resource_stats   per resource: its memories and their summed
--                              search_vector lengths (distinct lexemes each);
--   popagent_lexeme_stats     per (resource, lexeme): how many of the
--                              resource's memories hold the lexeme.
--
-- Invariant: after every committed statement, both tables equal what a full
-- count of popagent_memories would give (a lexeme whose count fell to 0 may
-- remain with 0). Statement-level triggers with transition tables maintain them,
-- so a bulk insert or a maintenance delete costs one aggregated upsert, not one
-- per row. Writers lock the resource's stats row first and its lexeme rows in
-- lexeme order, so concurrent writers of one resource queue on that row and
-- never deadlock; writers of different resources never meet here.

-- No CHECK (documents >= 0): PostgreSQL checks the proposed row of an
-- INSERT ... ON CONFLICT before it finds the conflict, and a decrement is
-- proposed as a negative row. The triggers never take a count below zero.
CREATE TABLE popagent_resource_stats (
    resource_id  text PRIMARY KEY,
    documents    bigint NOT NULL,
    total_length bigint NOT NULL
);

CREATE TABLE popagent_lexeme_stats (
    resource_id text NOT NULL,
    lexeme      text NOT NULL,
    documents   bigint NOT NULL,
    PRIMARY KEY (resource_id, lexeme)
) WITH (fillfactor = 70);  -- room for HOT updates: every write updates counts, no key changes

-- Transition tables are visible only in the trigger function itself, hence two
-- functions that differ in the table they read and the sign they apply.
CREATE FUNCTION popagent_memories_stats_insert() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    INSERT INTO popagent_resource_stats AS s (resource_id, documents, total_length)
    SELECT resource_id, count(*), coalesce(sum(length(search_vector)), 0)
    FROM new_memories GROUP BY resource_id ORDER BY resource_id
    ON CONFLICT (resource_id) DO UPDATE
    SET documents = s.documents + EXCLUDED.documents,
        total_length = s.total_length + EXCLUDED.total_length;
    INSERT INTO popagent_lexeme_stats AS s (resource_id, lexeme, documents)
    SELECT t.resource_id, l.lexeme, count(*)
    FROM new_memories t CROSS JOIN LATERAL unnest(t.search_vector) AS l
    GROUP BY t.resource_id, l.lexeme ORDER BY t.resource_id, l.lexeme
    ON CONFLICT (resource_id, lexeme) DO UPDATE SET documents = s.documents + EXCLUDED.documents;
    RETURN NULL;
END
$fn$;

CREATE FUNCTION popagent_memories_stats_delete() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    INSERT INTO popagent_resource_stats AS s (resource_id, documents, total_length)
    SELECT resource_id, -count(*), -coalesce(sum(length(search_vector)), 0)
    FROM old_memories GROUP BY resource_id ORDER BY resource_id
    ON CONFLICT (resource_id) DO UPDATE
    SET documents = s.documents + EXCLUDED.documents,
        total_length = s.total_length + EXCLUDED.total_length;
    INSERT INTO popagent_lexeme_stats AS s (resource_id, lexeme, documents)
    SELECT t.resource_id, l.lexeme, -count(*)
    FROM old_memories t CROSS JOIN LATERAL unnest(t.search_vector) AS l
    GROUP BY t.resource_id, l.lexeme ORDER BY t.resource_id, l.lexeme
    ON CONFLICT (resource_id, lexeme) DO UPDATE SET documents = s.documents + EXCLUDED.documents;
    RETURN NULL;
END
$fn$;

-- Content changes are single facts (episodes are immutable), so a row trigger
-- suffices; its WHEN clause keeps recall's access bookkeeping trigger-free.
CREATE FUNCTION popagent_memories_stats_update() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF OLD.resource_id <> NEW.resource_id THEN
        RAISE EXCEPTION 'a memory never moves to another resource';
    END IF;
    UPDATE popagent_resource_stats
    SET total_length = total_length - length(OLD.search_vector) + length(NEW.search_vector)
    WHERE resource_id = NEW.resource_id;
    INSERT INTO popagent_lexeme_stats AS s (resource_id, lexeme, documents)
    SELECT NEW.resource_id, d.lexeme, sum(d.delta)
    FROM (SELECT lexeme, -1 AS delta FROM unnest(OLD.search_vector)
          UNION ALL
          SELECT lexeme, 1 FROM unnest(NEW.search_vector)) d
    GROUP BY d.lexeme HAVING sum(d.delta) <> 0
    ORDER BY d.lexeme
    ON CONFLICT (resource_id, lexeme) DO UPDATE SET documents = s.documents + EXCLUDED.documents;
    RETURN NULL;
END
$fn$;

CREATE TRIGGER popagent_memories_stats_insert
    AFTER INSERT ON popagent_memories
    REFERENCING NEW TABLE AS new_memories
    FOR EACH STATEMENT EXECUTE FUNCTION popagent_memories_stats_insert();

CREATE TRIGGER popagent_memories_stats_delete
    AFTER DELETE ON popagent_memories
    REFERENCING OLD TABLE AS old_memories
    FOR EACH STATEMENT EXECUTE FUNCTION popagent_memories_stats_delete();

CREATE TRIGGER popagent_memories_stats_update
    AFTER UPDATE OF content, resource_id ON popagent_memories
    FOR EACH ROW
    WHEN (OLD.search_vector IS DISTINCT FROM NEW.search_vector
          OR OLD.resource_id IS DISTINCT FROM NEW.resource_id)
    EXECUTE FUNCTION popagent_memories_stats_update();

-- Existing memories, counted once.
INSERT INTO popagent_resource_stats (resource_id, documents, total_length)
SELECT resource_id, count(*), coalesce(sum(length(search_vector)), 0)
FROM popagent_memories GROUP BY resource_id;

INSERT INTO popagent_lexeme_stats (resource_id, lexeme, documents)
SELECT m.resource_id, l.lexeme, count(*)
FROM popagent_memories m CROSS JOIN LATERAL unnest(m.search_vector) AS l
GROUP BY m.resource_id, l.lexeme;

-- Misspelled and partial query words find the resource's own words that look
-- like them: a trigram search of its vocabulary, small next to its memories.
CREATE INDEX popagent_lexeme_stats_trgm_idx
    ON popagent_lexeme_stats USING gin (resource_id, lexeme gin_trgm_ops);

-- Full-text candidates by (resource, lexeme) keys. The two-column GIN index of
-- 0001 intersects the resource's posting list, which holds every memory of the
-- resource, with the lexemes' lists; its cost grew with the resource. A key
-- per (resource, lexeme) has a posting list of just that resource's matching
-- memories. The length prefix makes the key unambiguous for any resource ID.
-- COST: about 25 microseconds a row; at the default cost the planner took it for
-- a cheap operator and preferred computing it over a whole small table to the index.
CREATE FUNCTION popagent_scoped_lexemes(resource_id text, search_vector tsvector)
RETURNS text[] LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE COST 1000 AS $fn$
    SELECT coalesce(array_agg(char_length(resource_id) || ':' || resource_id || ':' || l), '{}')
    FROM unnest(tsvector_to_array(search_vector)) AS l
$fn$;

-- A GIN index queues new entries in a pending list that every search reads in
-- full; at the default 4 MB limit that alone cost recall ~1.5 ms. 256 kB keeps
-- the batching of inserts and bounds that read to 32 pages.
CREATE INDEX popagent_memories_scoped_lexemes_idx
    ON popagent_memories USING gin (popagent_scoped_lexemes(resource_id, search_vector))
    WITH (gin_pending_list_limit = 256);

DROP INDEX popagent_memories_search_idx;

-- Recall no longer reads trigrams of memory text (it matches query words against
-- the vocabulary above), and this index cost about a third of every insert:
-- pg_trgm extracts a trigram set from the whole content. Listing's substring
-- filter (ILIKE) walks the resource's rows newest first instead.
DROP INDEX popagent_memories_trgm_idx;
