-- Asynchronous observation buffering: buffered chunks and the actor model of each session.
-- Never edit this file after it has landed; add a new numbered migration instead.
--
-- A background Observer run stores its result as a group with status 'buffered'
-- (its group pointer names the messages it covers); activation turns buffered
-- groups 'active' (moving them into the head generation) and moves the cursor,
-- without a model call. Buffered chunks of one session continue right after the
-- cursor, in order; a chunk that a synchronous observation overtook is deleted.
ALTER TABLE popagent_observation_groups
    DROP CONSTRAINT popagent_observation_groups_status_check;
ALTER TABLE popagent_observation_groups
    ADD CONSTRAINT popagent_observation_groups_status_check
    CHECK (status IN ('active', 'buffered'));

CREATE INDEX popagent_observation_groups_buffered_idx
    ON popagent_observation_groups (resource_id, session_id, first_message_id)
    WHERE status = 'buffered';

-- popagent_observation_actors: the provider/model that produced the session's
-- latest assistant step (recorded when a turn's history is loaded), so that the
-- next turn can notice a provider change. Thread-scoped, deleted with the session.
CREATE TABLE popagent_observation_actors (
    resource_id text NOT NULL,
    session_id  text NOT NULL,
    actor       text NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (resource_id, session_id),
    FOREIGN KEY (resource_id, session_id)
        REFERENCES popagent_sessions (resource_id, session_id) ON DELETE CASCADE
);
