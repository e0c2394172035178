-- Thread memory: chat sessions and their exact message history.
-- Deleting a session deletes its messages (and, through later migrations, any
-- other thread-scoped state) and never touches popagent_memories.

CREATE TABLE popagent_sessions (
    resource_id text NOT NULL CHECK (resource_id <> '' AND char_length(resource_id) <= 256),
    session_id  text NOT NULL CHECK (session_id <> '' AND char_length(session_id) <= 256),
    title       text CHECK (char_length(title) <= 200),
    metadata    jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(metadata) = 'object'),
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (resource_id, session_id)
);

CREATE INDEX popagent_sessions_recent_idx
    ON popagent_sessions (resource_id, updated_at DESC, session_id);

CREATE TABLE popagent_messages (
    -- The identity orders messages: stable even for messages written in the
    -- same millisecond (a session's writes are serialized by its turn).
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    resource_id text NOT NULL,
    session_id  text NOT NULL,
    role        text NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
    content     text NOT NULL DEFAULT '',
    -- Structured parts: tool calls, tool results, attachments (a JSON array).
    parts       jsonb NOT NULL DEFAULT '[]'::jsonb CHECK (jsonb_typeof(parts) = 'array'),
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    FOREIGN KEY (resource_id, session_id)
        REFERENCES popagent_sessions (resource_id, session_id) ON DELETE CASCADE
);

CREATE INDEX popagent_messages_thread_idx
    ON popagent_messages (resource_id, session_id, id);
