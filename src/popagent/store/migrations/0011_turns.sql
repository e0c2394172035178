-- Chat turns: one row per Agent.run_turn, so that a turn that never finished
-- (the process was killed, the model failed, the turn was cancelled) is marked
-- as such instead of leaving a user message with nothing after it.
-- Never edit this file after it has landed; add a new numbered migration instead.
--
-- A turn is created 'running' by the same statement that stores its user
-- message; it becomes 'completed' in the one transaction that stores its final
-- assistant message and its episode, 'failed' when the turn raises, and
-- 'interrupted' when it was cancelled or when a later turn of the session
-- starts while it still reads 'running' (turns of one session run one at a
-- time, so a running predecessor is a dead one). Readers also treat a turn still
-- 'running' long after the longest a turn may take as interrupted.
CREATE TABLE popagent_turns (
    resource_id text NOT NULL,
    session_id  text NOT NULL,
    turn_id     bigint GENERATED ALWAYS AS IDENTITY,
    status      text NOT NULL DEFAULT 'running'
                CHECK (status IN ('running', 'completed', 'failed', 'interrupted')),
    started_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    ended_at    timestamptz,
    CHECK ((status = 'running') = (ended_at IS NULL)),
    PRIMARY KEY (resource_id, session_id, turn_id),
    FOREIGN KEY (resource_id, session_id)
        REFERENCES popagent_sessions (resource_id, session_id) ON DELETE CASCADE
);

-- The running turns of a session: what a new turn marks interrupted.
CREATE INDEX popagent_turns_running_idx
    ON popagent_turns (resource_id, session_id)
    WHERE status = 'running';

-- The turn a message belongs to; NULL for messages written outside a turn
-- (the API, imports). The key includes the session, so a message can only
-- name a turn of its own session.
ALTER TABLE popagent_messages ADD COLUMN turn_id bigint;
ALTER TABLE popagent_messages
    ADD CONSTRAINT popagent_messages_turn_fkey
    FOREIGN KEY (resource_id, session_id, turn_id)
        REFERENCES popagent_turns (resource_id, session_id, turn_id) ON DELETE CASCADE;
