-- Recall statistics counted by the writing statements, not by statement-level triggers.
-- Never edit this file after it has landed; add a new numbered migration instead.
--
-- 0004's insert and delete triggers are statement-level triggers with
-- transition tables. A distributed table (Citus) cannot have those: every
-- INSERT and DELETE of popagent_memories failed with "executor could not find
-- named tuplestore". Row-level triggers would work there, but they count each
-- row apart: a batch of 1,000 episodes took twice as long, a cleanup a hundred
-- times as long. So the statements of store/ that insert or delete memories
-- now count their rows themselves, in the same statement, aggregated as the
-- triggers did (store/recall_stats.py); the invariant of 0004 holds after every
-- statement of store/. The row-level trigger of content changes
-- (popagent_memories_stats_update) stays.
--
-- The statistics were exact when the triggers went (they ran until now), so
-- nothing is recounted.

DROP TRIGGER popagent_memories_stats_insert ON popagent_memories;
DROP TRIGGER popagent_memories_stats_delete ON popagent_memories;
DROP FUNCTION popagent_memories_stats_insert();
DROP FUNCTION popagent_memories_stats_delete();
