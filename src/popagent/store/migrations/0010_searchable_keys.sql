-- A fact's key is searchable: its words join the content's in the search vector,
-- so "which theme do I prefer?" finds the fact keyed `ui.theme` ("Prefers dark
-- mode") even though its content never says "theme". Keys are the stable,
-- semantic names of facts; episodes have none, so they are unchanged.
-- Never edit this file after it has landed; add a new numbered migration instead.

-- Dots, underscores, dashes, colons and slashes separate a key's words.
ALTER TABLE popagent_memories
    ALTER COLUMN search_vector SET EXPRESSION AS (
        to_tsvector(
            'english'::regconfig,
            content || coalesce(' ' || translate(key, '._-:/', '     '), '')
        )
    );

-- A key change alone now changes the search vector: the statistics trigger
-- must fire for it too.
DROP TRIGGER popagent_memories_stats_update ON popagent_memories;
CREATE TRIGGER popagent_memories_stats_update
    AFTER UPDATE OF content, key, resource_id ON popagent_memories
    FOR EACH ROW
    WHEN (OLD.search_vector IS DISTINCT FROM NEW.search_vector
          OR OLD.resource_id IS DISTINCT FROM NEW.resource_id)
    EXECUTE FUNCTION popagent_memories_stats_update();

-- The table rewrite above ran no triggers: count the statistics again.
DELETE FROM popagent_resource_stats;
DELETE FROM popagent_lexeme_stats;

INSERT INTO popagent_resource_stats (resource_id, documents, total_length)
SELECT resource_id, count(*), coalesce(sum(length(search_vector)), 0)
FROM popagent_memories GROUP BY resource_id;

INSERT INTO popagent_lexeme_stats (resource_id, lexeme, documents)
SELECT m.resource_id, l.lexeme, count(*)
FROM popagent_memories m CROSS JOIN LATERAL unnest(m.search_vector) AS l
GROUP BY m.resource_id, l.lexeme;
