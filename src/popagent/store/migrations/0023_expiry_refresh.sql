-- A read that refreshes a TTL is not an edit: it makes no fact version.
-- Never edit this file after it has landed; add a new numbered migration instead.
--
-- LangGraph's store contract (popagent.adapters.langgraph) lets a read extend an
-- item's time to live: the fact's expires_at moves to its TTL from now. Under
-- 0012's trigger every such read would keep the old value as a version, so a
-- frequently read item would grow a history of identical values. The statement
-- that extends expiry (store/caller_vectors.py, EXTEND_EXPIRY) marks its
-- transaction with the setting popagent.extending_expiry = 'on'; an update that
-- changes only expires_at in such a transaction keeps no version.
--
-- Invariant (0012's, narrowed): every change of a fact's content, key or
-- importance, and every change of its expiry made other than by a TTL refresh,
-- keeps the value it replaces as a version.

DROP TRIGGER popagent_facts_keep_version ON popagent_memories;

CREATE TRIGGER popagent_facts_keep_version
    AFTER UPDATE OF content, key, importance, expires_at ON popagent_memories
    FOR EACH ROW
    WHEN (OLD.kind = 'fact'
          AND (OLD.content, OLD.key, OLD.importance, OLD.expires_at)
              IS DISTINCT FROM (NEW.content, NEW.key, NEW.importance, NEW.expires_at)
          AND NOT ((OLD.content, OLD.key, OLD.importance)
                       IS NOT DISTINCT FROM (NEW.content, NEW.key, NEW.importance)
                   AND current_setting('popagent.extending_expiry', true)
                       IS NOT DISTINCT FROM 'on'))
    EXECUTE FUNCTION popagent_facts_keep_version();
