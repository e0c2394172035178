-- The bytes of each resource's memory content, counted beside its memories.
-- Never edit this file after it has landed; add a new numbered migration instead.
--
-- The storage quota of multi-resource mode (popagent serve --quota-bytes) summed
-- octet_length(content) over every memory of the resource before each write
-- that adds content: a scan that grows with the resource. The statistics row
-- of 0004 already holds the resource's memory count; it now holds the bytes of
-- their content too, so the quota check is one primary-key lookup.
--
-- Invariant (0004's, extended): after every statement of store/, content_bytes
-- equals sum(octet_length(content)) over the resource's memories. The statements
-- that insert or delete memories count it with the rest (store/recall_stats.py);
-- the row trigger of content changes now also fires when the content changes
-- without changing its lexemes (punctuation, case, a stop word).

ALTER TABLE popagent_resource_stats ADD COLUMN content_bytes bigint NOT NULL DEFAULT 0;

UPDATE popagent_resource_stats s
SET content_bytes = c.bytes
FROM (SELECT resource_id, sum(octet_length(content)) AS bytes
      FROM popagent_memories GROUP BY resource_id) c
WHERE c.resource_id = s.resource_id;

CREATE OR REPLACE FUNCTION popagent_memories_stats_update() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF OLD.resource_id <> NEW.resource_id THEN
        RAISE EXCEPTION 'a memory never moves to another resource';
    END IF;
    UPDATE popagent_resource_stats
    SET total_length = total_length - length(OLD.search_vector) + length(NEW.search_vector),
        content_bytes = content_bytes - octet_length(OLD.content) + octet_length(NEW.content)
    WHERE resource_id = NEW.resource_id;
    IF OLD.search_vector IS DISTINCT FROM NEW.search_vector THEN
        INSERT INTO popagent_lexeme_stats AS s (resource_id, lexeme, documents)
        SELECT NEW.resource_id, d.lexeme, sum(d.delta)
        FROM (SELECT lexeme, -1 AS delta FROM unnest(OLD.search_vector)
              UNION ALL
              SELECT lexeme, 1 FROM unnest(NEW.search_vector)) d
        GROUP BY d.lexeme HAVING sum(d.delta) <> 0
        ORDER BY d.lexeme
        ON CONFLICT (resource_id, lexeme) DO UPDATE SET documents = s.documents + EXCLUDED.documents;
    END IF;
    RETURN NULL;
END
$fn$;

DROP TRIGGER popagent_memories_stats_update ON popagent_memories;

CREATE TRIGGER popagent_memories_stats_update
    AFTER UPDATE OF content, resource_id ON popagent_memories
    FOR EACH ROW
    WHEN (OLD.search_vector IS DISTINCT FROM NEW.search_vector
          OR OLD.content IS DISTINCT FROM NEW.content
          OR OLD.resource_id IS DISTINCT FROM NEW.resource_id)
    EXECUTE FUNCTION popagent_memories_stats_update();
