-- Memory embeddings for semantic recall, one row per (memory, model, chunk).
-- Never edit this file after it has landed; add a new numbered migration instead.
--
-- Invariants:
--   * a vector belongs to the memory and resource it names: the foreign key is
--     (resource_id, memory_id), so no row can point into another resource, and
--     deleting a memory deletes its vectors;
--   * every vector records the model that made it and its dimensions; recall
--     reads only the rows of the model it embeds the query with, so vectors of
--     two models are never ranked together;
--   * content_sha256 is the hash of the content the vector was made from: a row
--     whose hash differs from its memory's is stale (the fact was edited) and
--     is ignored by recall and redone by `popagent embed`.
--
-- The column has no fixed dimension so that any model fits; HNSW needs one, so
-- there is one partial index per common dimension (384: MiniLM/BGE-small,
-- 768: BGE-base/nomic, 1024: BGE-large/mxbai, 1536: OpenAI text-embedding-3-small).
-- Models of other sizes are searched exactly (correct, slower on big resources).

CREATE EXTENSION IF NOT EXISTS vector;

-- The target of the composite foreign key below.
CREATE UNIQUE INDEX popagent_memories_resource_id_uq ON popagent_memories (resource_id, id);

CREATE TABLE popagent_memory_embeddings (
    resource_id    text NOT NULL,
    memory_id      bigint NOT NULL,
    model          text NOT NULL CHECK (model <> '' AND char_length(model) <= 200),
    chunk          smallint NOT NULL CHECK (chunk >= 0),
    dimensions     integer NOT NULL CHECK (dimensions > 0 AND dimensions <= 16000),
    content_sha256 text NOT NULL CHECK (content_sha256 ~ '^[0-9a-f]{64}$'),
    embedding      vector NOT NULL CHECK (vector_dims(embedding) = dimensions),
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (resource_id, memory_id, model, chunk),
    FOREIGN KEY (resource_id, memory_id)
        REFERENCES popagent_memories (resource_id, id) ON DELETE CASCADE
);

-- Exact search within one resource and model, and backfill's progress.
CREATE INDEX popagent_memory_embeddings_model_idx
    ON popagent_memory_embeddings (resource_id, model);

CREATE INDEX popagent_memory_embeddings_hnsw_384 ON popagent_memory_embeddings
    USING hnsw ((embedding::vector(384)) vector_cosine_ops) WHERE dimensions = 384;
CREATE INDEX popagent_memory_embeddings_hnsw_768 ON popagent_memory_embeddings
    USING hnsw ((embedding::vector(768)) vector_cosine_ops) WHERE dimensions = 768;
CREATE INDEX popagent_memory_embeddings_hnsw_1024 ON popagent_memory_embeddings
    USING hnsw ((embedding::vector(1024)) vector_cosine_ops) WHERE dimensions = 1024;
CREATE INDEX popagent_memory_embeddings_hnsw_1536 ON popagent_memory_embeddings
    USING hnsw ((embedding::vector(1536)) vector_cosine_ops) WHERE dimensions = 1536;

-- A memory whose content changes (an edited fact) loses its vectors in the same
-- statement, so no stale vector can ever be ranked; the writer adds new ones
-- in its transaction, or `popagent embed` does later.
CREATE FUNCTION popagent_memories_drop_stale_embeddings() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    DELETE FROM popagent_memory_embeddings
    WHERE resource_id = NEW.resource_id AND memory_id = NEW.id;
    RETURN NULL;
END
$fn$;

CREATE TRIGGER popagent_memories_drop_stale_embeddings
    AFTER UPDATE OF content ON popagent_memories
    FOR EACH ROW WHEN (OLD.content_sha256 IS DISTINCT FROM NEW.content_sha256)
    EXECUTE FUNCTION popagent_memories_drop_stale_embeddings();
