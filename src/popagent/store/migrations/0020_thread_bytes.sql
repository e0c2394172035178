-- The bytes of each resource's chats, counted beside its memories, for the
-- storage quota of multi-resource mode (popagent serve --quota-bytes).
-- Never edit this file after it has landed; add a new numbered migration instead.
--
-- The quota counted memory content only (0019), so a key could store any
-- amount of chat history: session items of 225 KB each, all accepted. Each
-- resource's statistics row now also holds the bytes of its messages: their
-- text, their parts and their item, as JSON text (popagent_message_bytes, the
-- one definition of a message's size). The quota is checked against the
-- memories' bytes and these together, still one primary-key lookup.
--
-- Invariant: after every statement of store/, thread_bytes equals
-- sum(popagent_message_bytes(content, parts, item)) over the resource's
-- messages. No trigger keeps it (a row trigger would update the resource's row
-- once per message, and a session's delete would then cost as much per message
-- as the counting triggers of 0004 did, docs/scaling.md): each statement that
-- inserts, deletes or rewrites messages counts them itself (store/recall_stats.py,
-- thread_counted), and a session is deleted by deleting its messages first,
-- counted, under a lock on the session's row that keeps new messages out
-- (store/threads.py). A purge deletes the whole row.

CREATE FUNCTION popagent_message_bytes(content text, parts jsonb, item jsonb) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $fn$ SELECT octet_length(content)::bigint + octet_length(parts::text)
                   + coalesce(octet_length(item::text), 0) $fn$;

ALTER TABLE popagent_resource_stats ADD COLUMN thread_bytes bigint NOT NULL DEFAULT 0;
-- A resource with chats and no memories has a row too: its memory counts are 0.
ALTER TABLE popagent_resource_stats ALTER COLUMN documents SET DEFAULT 0;
ALTER TABLE popagent_resource_stats ALTER COLUMN total_length SET DEFAULT 0;

INSERT INTO popagent_resource_stats AS s (resource_id, thread_bytes)
SELECT resource_id, sum(popagent_message_bytes(content, parts, item))
FROM popagent_messages GROUP BY resource_id ORDER BY resource_id
ON CONFLICT (resource_id) DO UPDATE SET thread_bytes = EXCLUDED.thread_bytes;
