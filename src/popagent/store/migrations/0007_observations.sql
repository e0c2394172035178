-- Observational memory: a thread's observation log, its generations and its observation groups.
-- Never edit this file after it has landed; add a new numbered migration instead.
--
-- Thread-scoped: every row belongs to one session and is deleted with it (the
-- foreign keys cascade from popagent_sessions); nothing here references or
-- touches popagent_memories. Raw messages stay in popagent_messages.
--
-- popagent_observation_logs: one row per generation of a session's log. Only the
-- newest generation (the head) is active; a reflection inserts generation + 1
-- and the older rows stay stored as history. last_observed_message_id is the
-- cursor: every message of the session with a greater id is unobserved.
-- next_reflection_tokens holds reflection back after an unproductive one, so a
-- log that cannot shrink below the threshold does not reflect on every turn.
CREATE TABLE popagent_observation_logs (
    id                       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    resource_id              text NOT NULL,
    session_id               text NOT NULL,
    generation               integer NOT NULL CHECK (generation >= 0),
    origin                   text NOT NULL CHECK (origin IN ('observation', 'reflection')),
    observations             text NOT NULL DEFAULT '',
    observation_tokens       integer NOT NULL DEFAULT 0 CHECK (observation_tokens >= 0),
    last_observed_message_id bigint,
    -- For a reflection: the observation groups (of the previous generation) it rewrote.
    covered_group_ids        bigint[] NOT NULL DEFAULT '{}',
    next_reflection_tokens   integer NOT NULL DEFAULT 0 CHECK (next_reflection_tokens >= 0),
    created_at               timestamptz NOT NULL DEFAULT now(),
    updated_at               timestamptz NOT NULL DEFAULT now(),
    UNIQUE (resource_id, session_id, generation),
    FOREIGN KEY (resource_id, session_id)
        REFERENCES popagent_sessions (resource_id, session_id) ON DELETE CASCADE
);

-- popagent_observation_groups: each observation batch (and each reflection) with
-- its group pointer, the first and last source message id it came from. A
-- group belongs to the generation it was written into (log_id) and stays
-- stored when a later generation replaces that one, so its pointer still
-- resolves. status is 'active' for everything this migration's engine writes;
-- asynchronous buffering adds 'buffered' chunks (and widens the CHECK) later.
CREATE TABLE popagent_observation_groups (
    id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    resource_id        text NOT NULL,
    session_id         text NOT NULL,
    log_id             bigint NOT NULL REFERENCES popagent_observation_logs (id) ON DELETE CASCADE,
    kind               text NOT NULL CHECK (kind IN ('observation', 'reflection')),
    status             text NOT NULL DEFAULT 'active'
                       CONSTRAINT popagent_observation_groups_status_check
                       CHECK (status IN ('active')),
    first_message_id   bigint NOT NULL,
    last_message_id    bigint NOT NULL CHECK (last_message_id >= first_message_id),
    observations       text NOT NULL,
    observation_tokens integer NOT NULL CHECK (observation_tokens >= 0),
    message_tokens     integer NOT NULL CHECK (message_tokens >= 0),
    created_at         timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (resource_id, session_id)
        REFERENCES popagent_sessions (resource_id, session_id) ON DELETE CASCADE
);

CREATE INDEX popagent_observation_logs_head_idx
    ON popagent_observation_logs (resource_id, session_id, generation DESC);
CREATE INDEX popagent_observation_groups_log_idx
    ON popagent_observation_groups (resource_id, log_id, id);
CREATE INDEX popagent_observation_groups_session_idx
    ON popagent_observation_groups (resource_id, session_id, id);
