-- Row-level security on every table that has resource_id (multi-resource mode).
-- Never edit this file after it has landed; add a new numbered migration instead.
--
-- The boundary: a connection that serves one resource in multi-resource mode
-- runs as the role popagent_tenant with the setting popagent.resource_id set to
-- the resource of the request's API key (store/tenant.py sets both, or resets
-- them, whenever a pooled connection is taken by a caller serving another
-- resource or none). The policy below
-- lets that role see, insert, update and delete only rows whose resource_id
-- equals the setting: a query that forgets its WHERE still reads one resource.
--
-- Invariants:
--   * RLS is enabled, not forced, and the policy applies to every role: the
--     owner (the library, the CLI, single-resource mode, maintenance and
--     purge: "the bypass", named in store/tenant.py) is unaffected, so nothing
--     outside multi-resource mode changes;
--   * every table with resource_id has the policy popagent_tenant_rows, except
--     the credential tables of 0017, which are read before a resource is known
--     and never under popagent_tenant; tests/test_row_security.py fails for a
--     table that has neither;
--   * without the privilege to create the role (a managed database, say), the
--     migration still applies and says so: multi-resource mode then refuses to
--     serve (the role is missing) rather than serving without the boundary.

DO $rls$
DECLARE
    t text;
    f regprocedure;
BEGIN
    -- Recall's index conditions (text[] overlap on popagent_scoped_lexemes, pg_trgm's
    -- %) would otherwise not be usable under a policy: PostgreSQL evaluates a
    -- function that is not LEAKPROOF only after the policy's condition, so the
    -- candidate search fell back to reading every row of the resource (25-35x
    -- slower, bench/latency.py --rls). These three leak nothing but their result
    -- (no error depends on the values compared). Marking them needs a superuser
    -- (the embedded server's role); elsewhere recall under RLS is slower, and the
    -- migration says so.
    IF (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user) THEN
        FOR f IN
            SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
            WHERE p.proname IN ('arrayoverlap', 'similarity_op', 'popagent_scoped_lexemes')
              AND NOT p.proleakproof
        LOOP
            EXECUTE format('ALTER FUNCTION %s LEAKPROOF', f);
        END LOOP;
    ELSE
        RAISE WARNING 'popagent: not a superuser, so recall''s operators stay non-LEAKPROOF; '
            'recall in multi-resource mode will be slower (docs/server.md)';
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'popagent_tenant') THEN
        BEGIN
            CREATE ROLE popagent_tenant NOLOGIN;
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE WARNING 'popagent: cannot create the role popagent_tenant (%); '
                'multi-resource mode needs it (docs/server.md)', SQLERRM;
        END;
    END IF;
    FOR t IN
        SELECT c.relname
        FROM pg_catalog.pg_class c
        JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attname = 'resource_id'
        WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'
          AND c.relname LIKE 'popagent\_%'
          AND c.relname NOT IN ('popagent_api_keys', 'popagent_logins',
                                'popagent_login_failures', 'popagent_access_audit')
        ORDER BY 1
    LOOP
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
        EXECUTE format(
            'CREATE POLICY popagent_tenant_rows ON %I TO public '
            'USING (resource_id = current_setting(''popagent.resource_id'', true)) '
            'WITH CHECK (resource_id = current_setting(''popagent.resource_id'', true))', t);
    END LOOP;
    IF EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'popagent_tenant') THEN
        BEGIN
            -- So that the owner may SET ROLE popagent_tenant.
            EXECUTE format('GRANT popagent_tenant TO %I', current_user);
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE WARNING 'popagent: cannot grant popagent_tenant to % (%)', current_user, SQLERRM;
        END;
        EXECUTE format('GRANT USAGE ON SCHEMA %I TO popagent_tenant', current_schema());
        FOR t IN
            SELECT c.relname FROM pg_catalog.pg_policy p
            JOIN pg_catalog.pg_class c ON c.oid = p.polrelid
            WHERE p.polname = 'popagent_tenant_rows'
              AND c.relnamespace = current_schema()::regnamespace
        LOOP
            EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON %I TO popagent_tenant', t);
        END LOOP;
        EXECUTE format('GRANT USAGE ON ALL SEQUENCES IN SCHEMA %I TO popagent_tenant',
                       current_schema());
    END IF;
END
$rls$;
