-- popagent_memories: the long-term store shared by every session of one resource.
-- Never edit this file after it has landed; add a new numbered migration instead.

CREATE EXTENSION IF NOT EXISTS pg_trgm;
-- btree_gin lets one GIN index lead with resource_id, so a text search of one
-- resource never walks other resources' postings.
CREATE EXTENSION IF NOT EXISTS btree_gin;

CREATE TABLE popagent_memories (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    resource_id     text NOT NULL CHECK (resource_id <> '' AND char_length(resource_id) <= 256),
    session_id      text CHECK (session_id <> '' AND char_length(session_id) <= 256),
    kind            text NOT NULL CHECK (kind IN ('fact', 'episode')),
    key             text CHECK (key <> '' AND char_length(key) <= 128),
    content         text NOT NULL CHECK (content <> ''),
    content_sha256  text NOT NULL CHECK (content_sha256 ~ '^[0-9a-f]{64}$'),
    importance      double precision NOT NULL DEFAULT 0.5
                    CHECK (importance >= 0 AND importance <= 1),
    search_vector   tsvector GENERATED ALWAYS AS (to_tsvector('english'::regconfig, content)) STORED,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    accessed_at     timestamptz,
    access_count    integer NOT NULL DEFAULT 0 CHECK (access_count >= 0),
    -- Only facts carry a semantic key, and only facts have the 2,000-character cap.
    CONSTRAINT popagent_memories_key_on_facts CHECK (kind = 'fact' OR key IS NULL),
    CONSTRAINT popagent_memories_fact_length CHECK (kind <> 'fact' OR char_length(content) <= 2000)
) WITH (fillfactor = 90);  -- room for HOT updates of accessed_at / access_count

-- One current fact per (resource, key).
CREATE UNIQUE INDEX popagent_memories_fact_key_uq
    ON popagent_memories (resource_id, key)
    WHERE kind = 'fact' AND key IS NOT NULL;

-- Keyless facts and episodes deduplicate by content hash, per resource and kind.
CREATE UNIQUE INDEX popagent_memories_content_uq
    ON popagent_memories (resource_id, kind, content_sha256)
    WHERE key IS NULL;

-- Listing, paging, retention by age and the per-resource episode cap.
CREATE INDEX popagent_memories_resource_kind_created_idx
    ON popagent_memories (resource_id, kind, created_at DESC, id DESC);

-- Maintenance's age cut across all resources.
CREATE INDEX popagent_memories_episode_created_idx
    ON popagent_memories (created_at)
    WHERE kind = 'episode';

-- Recall candidates: full text and trigram, both led by the resource.
CREATE INDEX popagent_memories_search_idx
    ON popagent_memories USING gin (resource_id, search_vector);

CREATE INDEX popagent_memories_trgm_idx
    ON popagent_memories USING gin (resource_id, content gin_trgm_ops);
