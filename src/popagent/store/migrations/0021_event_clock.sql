-- The event clock: when what a memory tells happened, is planned, or holds.
-- Never edit this file after it has landed; add a new numbered migration instead.
--
-- Every memory already has the record clock (created_at, updated_at; a fact's
-- versions' valid_from and valid_to): when the store learned it. The event clock
-- is the interval [happened_start, happened_end) that the memory's own words name
-- ("last Friday", "in spring 2021", "next Tuesday"), resolved against when they
-- were said (memory/temporal.py), or that the writer gave (happened_at), with its
-- precision and the words it came from.
--
-- Invariants:
--   * unknown stays unknown: all four columns are NULL, or start, end and
--     precision are all set (the phrase may be absent when the writer gave a
--     date); nothing is ever backfilled with a guess, so existing rows stay NULL;
--   * a period is kept whole: a year is [1 January, next 1 January) with
--     precision 'year', never the day 1 January;
--   * the interval is not empty (end > start).

ALTER TABLE popagent_memories
    ADD COLUMN happened_start     timestamptz,
    ADD COLUMN happened_end       timestamptz,
    ADD COLUMN happened_precision text,
    ADD COLUMN happened_phrase    text,
    ADD CONSTRAINT popagent_memories_event_clock CHECK (
        (happened_start IS NULL AND happened_end IS NULL AND happened_precision IS NULL
         AND happened_phrase IS NULL)
        OR (happened_start IS NOT NULL AND happened_end > happened_start
            AND happened_precision IN ('day', 'week', 'month', 'season', 'year')
            AND (happened_phrase IS NULL OR char_length(happened_phrase) BETWEEN 1 AND 200))
    );
