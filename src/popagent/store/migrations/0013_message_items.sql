-- A framework's own record of a message: the OpenAI Agents SDK session item
-- (a message, a function call or its output, a reasoning item, ...) kept
-- verbatim, credentials redacted, so a session reads back exactly what was
-- added. role/content/parts stay the popagent view of the same message (what
-- the GUI, the observer and recall read); messages written by popagent itself
-- have no item.
-- Never edit this file after it has landed; add a new numbered migration instead.
ALTER TABLE popagent_messages
    ADD COLUMN item jsonb CHECK (item IS NULL OR jsonb_typeof(item) = 'object');
