-- popagent_audit: one row per hook firing around a model call or a tool call.
-- Never edit this file after it has landed; add a new numbered migration instead.
--
-- Rows hold names, ids, counts, sizes, timing and outcomes only: no message
-- text, memory content, recalled text, tool argument values, error messages
-- or secrets (nothing here has room for them: there is no free-text column).
-- The table has its own retention: deleting a session, long-term memory
-- cleanup and the secret store never touch it (deliberately no foreign key).
--
-- A call's 'before_*' and 'after_*' rows share call_id. 'before_*' rows carry
-- no duration, outcome or output size.

CREATE TABLE popagent_audit (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    resource_id    text NOT NULL CHECK (resource_id <> '' AND char_length(resource_id) <= 256),
    session_id     text CHECK (session_id <> '' AND char_length(session_id) <= 256),
    call_id        uuid NOT NULL,
    hook           text NOT NULL CHECK (hook IN ('before_model_call', 'after_model_call',
                                                 'before_tool_call', 'after_tool_call')),
    -- NULL on model-call rows.
    tool           text CHECK (char_length(tool) <= 64),
    -- NULL on tool-call rows.
    model          text CHECK (char_length(model) <= 256),
    started_at     timestamptz NOT NULL,
    duration_ms    double precision CHECK (duration_ms >= 0),
    outcome        text CHECK (outcome IN ('ok', 'error', 'refused')),
    -- The exception's class name only; messages can quote content.
    error_type     text CHECK (char_length(error_type) <= 128),
    input_chars    integer CHECK (input_chars >= 0),
    output_chars   integer CHECK (output_chars >= 0),
    message_count  integer CHECK (message_count >= 0),
    argument_names text[],
    CONSTRAINT popagent_audit_after_rows_have_an_outcome
        CHECK ((hook IN ('after_model_call', 'after_tool_call'))
               = (outcome IS NOT NULL AND duration_ms IS NOT NULL)),
    CONSTRAINT popagent_audit_tool_rows_name_the_tool
        CHECK ((hook IN ('before_tool_call', 'after_tool_call')) = (tool IS NOT NULL))
);

-- Reading one resource's log, or one session's, newest first.
CREATE INDEX popagent_audit_resource_idx
    ON popagent_audit (resource_id, id DESC);

CREATE INDEX popagent_audit_session_idx
    ON popagent_audit (resource_id, session_id, id DESC);
