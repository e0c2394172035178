-- popagent_memory_settings: the runtime settings of observational memory, one row per resource.
-- Never edit this file after it has landed; add a new numbered migration instead.
--
-- A resource without a row has every setting at its default. The defaults here
-- are Mastra's (see docs/observational-memory.md) and equal those of
-- popagent.observe.settings.MemorySettings; a test compares them.
--
-- Values are stored as whole percents and token counts; NULL means "off". The
-- execution snapshot converts percents to Mastra's ratios (a retained-context
-- percent inverts: Mastra's ratio is the share removed). The CHECK constraints
-- repeat the model's ranges and its simple rules across columns, so that even
-- SQL that bypasses the library cannot store settings the engine would refuse.
--
-- version starts at 0 for the default row an update creates inside its own
-- transaction, and every write adds one: it never goes back, not even on reset.

CREATE TABLE popagent_memory_settings (
    resource_id  text PRIMARY KEY
                 CHECK (resource_id <> '' AND char_length(resource_id) <= 256),
    version      integer NOT NULL DEFAULT 0 CHECK (version >= 0),
    updated_at   timestamptz NOT NULL DEFAULT now(),

    observation_threshold_tokens integer NOT NULL DEFAULT 30000
        CHECK (observation_threshold_tokens BETWEEN 100 AND 10000000),
    reflection_threshold_tokens  integer NOT NULL DEFAULT 40000
        CHECK (reflection_threshold_tokens BETWEEN 100 AND 10000000),

    -- Retained recent context: a percent of the observation threshold, or a count.
    retained_context_percent     smallint DEFAULT 20
        CHECK (retained_context_percent BETWEEN 0 AND 99),
    retained_context_tokens      integer
        CHECK (retained_context_tokens BETWEEN 1000 AND 10000000),

    -- Async buffering: an interval as a percent or a count; both NULL = off.
    observation_buffer_percent   smallint DEFAULT 20
        CHECK (observation_buffer_percent BETWEEN 1 AND 99),
    observation_buffer_tokens    integer
        CHECK (observation_buffer_tokens BETWEEN 1 AND 10000000),
    reflection_buffer_start_percent smallint DEFAULT 50
        CHECK (reflection_buffer_start_percent BETWEEN 1 AND 100),

    -- Safety bounds (blockAfter): a percent of the phase's threshold, or a count.
    observation_block_after_percent smallint DEFAULT 120
        CHECK (observation_block_after_percent BETWEEN 100 AND 9999),
    observation_block_after_tokens  integer
        CHECK (observation_block_after_tokens BETWEEN 100 AND 10000000),
    reflection_block_after_percent  smallint DEFAULT 120
        CHECK (reflection_block_after_percent BETWEEN 100 AND 9999),
    reflection_block_after_tokens   integer
        CHECK (reflection_block_after_tokens BETWEEN 100 AND 10000000),

    -- Early activation: 'auto' or whole seconds as text; NULL = off.
    observation_activate_after_idle text
        CHECK (CASE WHEN observation_activate_after_idle IS NULL OR observation_activate_after_idle = 'auto' THEN true
                    WHEN observation_activate_after_idle ~ '^[1-9][0-9]{0,5}$'
                        THEN observation_activate_after_idle::integer <= 604800
                    ELSE false END),
    observation_activate_on_provider_change boolean NOT NULL DEFAULT false,
    reflection_activate_after_idle text
        CHECK (CASE WHEN reflection_activate_after_idle IS NULL OR reflection_activate_after_idle = 'auto' THEN true
                    WHEN reflection_activate_after_idle ~ '^[1-9][0-9]{0,5}$'
                        THEN reflection_activate_after_idle::integer <= 604800
                    ELSE false END),
    reflection_activate_on_provider_change boolean NOT NULL DEFAULT false,

    shared_token_budget  boolean NOT NULL DEFAULT false,
    temporal_markers     boolean NOT NULL DEFAULT false,

    -- MIME patterns forwarded to the Observer: '{*}' is all (true), '{}' none (false).
    forward_attachments  text[] NOT NULL DEFAULT '{image/*,application/pdf}'
        CHECK (cardinality(forward_attachments) <= 32
               AND array_position(forward_attachments, NULL) IS NULL
               AND array_to_string(forward_attachments, ' ') ~
                   '^((\*|[a-z0-9][a-z0-9!#$&^_.+-]{0,126}/(\*|[a-z0-9][a-z0-9!#$&^_.+-]{0,126}))( |$))*$'),

    -- 0 omits previous observations; NULL disables truncation.
    previous_observation_tokens integer DEFAULT 2000
        CHECK (previous_observation_tokens BETWEEN 0 AND 10000000),
    retrieval_scope      text CHECK (retrieval_scope IN ('thread', 'resource')),
    observer_guidance    text CHECK (char_length(observer_guidance) BETWEEN 1 AND 4000),
    reflector_guidance   text CHECK (char_length(reflector_guidance) BETWEEN 1 AND 4000),

    CONSTRAINT popagent_memory_settings_retained_context_is_one_value
        CHECK (num_nonnulls(retained_context_percent, retained_context_tokens) = 1),
    CONSTRAINT popagent_memory_settings_retained_tokens_below_threshold
        CHECK (retained_context_tokens < observation_threshold_tokens),
    CONSTRAINT popagent_memory_settings_buffer_interval_is_one_value
        CHECK (num_nonnulls(observation_buffer_percent, observation_buffer_tokens) <= 1),
    CONSTRAINT popagent_memory_settings_buffer_interval_below_threshold
        CHECK (observation_buffer_tokens < observation_threshold_tokens),
    CONSTRAINT popagent_memory_settings_block_after_at_least_threshold
        CHECK (observation_block_after_tokens >= observation_threshold_tokens
               AND reflection_block_after_tokens >= reflection_threshold_tokens),
    -- Shared budgets and async buffering are mutually exclusive.
    CONSTRAINT popagent_memory_settings_shared_budget_excludes_buffering
        CHECK (NOT (shared_token_budget
                    AND num_nonnulls(observation_buffer_percent, observation_buffer_tokens) > 0)),
    -- The reflection buffer start and both safety bounds exist only with buffering.
    CONSTRAINT popagent_memory_settings_buffering_dependents
        CHECK (CASE WHEN num_nonnulls(observation_buffer_percent, observation_buffer_tokens) > 0
                    THEN reflection_buffer_start_percent IS NOT NULL
                         AND num_nonnulls(observation_block_after_percent,
                                          observation_block_after_tokens) = 1
                         AND num_nonnulls(reflection_block_after_percent,
                                          reflection_block_after_tokens) = 1
                    ELSE num_nonnulls(reflection_buffer_start_percent,
                                      observation_block_after_percent,
                                      observation_block_after_tokens,
                                      reflection_block_after_percent,
                                      reflection_block_after_tokens) = 0
               END)
);
