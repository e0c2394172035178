-- Every key led by resource_id, so every table can be distributed by it.
-- Never edit this file after it has landed; add a new numbered migration instead.
--
-- A distributed PostgreSQL (Citus) places all rows of one resource_id on one
-- shard when every table is distributed by that column; it then requires
-- every primary key, unique constraint and foreign key of a distributed table
-- to include it. The ids stay globally unique identities, so nothing that
-- names a row by id changes; the keys just say what was always true (a row
-- belongs to one resource). docs/scaling.md has the distribution plan.

-- popagent_memories: (resource_id, id) was already unique (the target of the
-- embeddings' foreign key); it becomes the primary key.
ALTER TABLE popagent_memories DROP CONSTRAINT popagent_memories_pkey;
ALTER TABLE popagent_memories
    ADD CONSTRAINT popagent_memories_pkey PRIMARY KEY USING INDEX popagent_memories_resource_id_uq;

ALTER TABLE popagent_messages DROP CONSTRAINT popagent_messages_pkey;
ALTER TABLE popagent_messages ADD CONSTRAINT popagent_messages_pkey PRIMARY KEY (resource_id, id);

ALTER TABLE popagent_audit DROP CONSTRAINT popagent_audit_pkey;
ALTER TABLE popagent_audit ADD CONSTRAINT popagent_audit_pkey PRIMARY KEY (resource_id, id);

-- An observation group names its log with the resource too.
ALTER TABLE popagent_observation_groups DROP CONSTRAINT popagent_observation_groups_log_id_fkey;
ALTER TABLE popagent_observation_logs DROP CONSTRAINT popagent_observation_logs_pkey;
ALTER TABLE popagent_observation_logs
    ADD CONSTRAINT popagent_observation_logs_pkey PRIMARY KEY (resource_id, id);
ALTER TABLE popagent_observation_groups
    ADD CONSTRAINT popagent_observation_groups_log_id_fkey
    FOREIGN KEY (resource_id, log_id)
        REFERENCES popagent_observation_logs (resource_id, id) ON DELETE CASCADE;
ALTER TABLE popagent_observation_groups DROP CONSTRAINT popagent_observation_groups_pkey;
ALTER TABLE popagent_observation_groups
    ADD CONSTRAINT popagent_observation_groups_pkey PRIMARY KEY (resource_id, id);
