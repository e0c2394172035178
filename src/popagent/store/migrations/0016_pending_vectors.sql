-- Memories whose vectors are still to be written, for the background vector worker.
-- Never edit this file after it has landed; add a new numbered migration instead.
--
-- A write no longer embeds its memory before it commits: the triggers below
-- record the memory here, in the writing statement, and a vector worker
-- (popagent/memory/vector_worker.py) claims rows with FOR UPDATE SKIP LOCKED,
-- writes the vectors and deletes the rows in one transaction. So a write costs
-- one small insert more than before, and any number of workers in any number
-- of processes share the work without doing any of it twice.
--
-- Invariants:
--   * a memory that is inserted, or whose content changes, has a row here until
--     a worker has written vectors of that content, or until the memory is
--     deleted (the foreign key cascades); a process that dies with rows claimed
--     leaves them here (its transaction rolls back) for the next worker;
--   * a row names a memory, not a model: a database has one embedding model at a
--     time. A process that uses another model adds the memories without its
--     vectors here when it first works on a resource (store/pending.py,
--     ENQUEUE_MISSING);
--   * content_sha256 is the content whose vectors are pending; a content change
--     made while a worker holds the row waits for that worker's commit (the
--     ON CONFLICT DO UPDATE takes the row lock), then queues the memory again;
--   * every key and every statement names resource_id (docs/scaling.md).

CREATE TABLE popagent_pending_vectors (
    resource_id    text NOT NULL,
    memory_id      bigint NOT NULL,
    content_sha256 text NOT NULL,
    queued_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (resource_id, memory_id),
    FOREIGN KEY (resource_id, memory_id)
        REFERENCES popagent_memories (resource_id, id) ON DELETE CASCADE
);

-- A row trigger (no transition tables): one small insert per written memory.
CREATE FUNCTION popagent_memories_queue_vectors() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    INSERT INTO popagent_pending_vectors AS p (resource_id, memory_id, content_sha256)
    VALUES (NEW.resource_id, NEW.id, NEW.content_sha256)
    ON CONFLICT (resource_id, memory_id) DO UPDATE SET content_sha256 = EXCLUDED.content_sha256;
    RETURN NULL;
END
$fn$;

CREATE TRIGGER popagent_memories_queue_vectors_insert
    AFTER INSERT ON popagent_memories
    FOR EACH ROW EXECUTE FUNCTION popagent_memories_queue_vectors();

-- Named to fire before popagent_memories_drop_stale_embeddings (0009; row triggers
-- fire in name order): a content change first waits for a worker that holds the
-- memory's pending row, then deletes the old vectors, those that worker has just
-- written included. The other order deadlocks: the change would hold the old
-- vectors' rows while waiting for the worker, which waits for them to replace them.
CREATE TRIGGER popagent_memories_content_queues_vectors
    AFTER UPDATE OF content ON popagent_memories
    FOR EACH ROW WHEN (OLD.content_sha256 IS DISTINCT FROM NEW.content_sha256)
    EXECUTE FUNCTION popagent_memories_queue_vectors();

-- A store made before this migration: every memory that has no vector at all is
-- pending, so the next server (or `popagent recall`) embeds it with no manual step.
INSERT INTO popagent_pending_vectors (resource_id, memory_id, content_sha256)
SELECT m.resource_id, m.id, m.content_sha256
FROM popagent_memories m
WHERE NOT EXISTS (SELECT 1 FROM popagent_memory_embeddings e
                  WHERE e.resource_id = m.resource_id AND e.memory_id = m.id);
