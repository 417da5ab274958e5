-- +goose NO TRANSACTION
-- +goose Up
-- Every hot-path query reads through an index whose leading columns match
-- its predicate and order (issue 20), so a run costs the same however much
-- history the tables hold, with statistics or without. Built CONCURRENTLY:
-- on a deployment with history a plain build would hold the doors' inserts
-- for as long as it takes.
--
-- Without the migration's lock_timeout (store.MigrateWith): a concurrent
-- build waits for every older transaction while holding nothing an
-- ordinary query needs, and one that gave up would leave an INVALID index.
-- RESET gives the session back its bound (design.md §Deployment).
SET lock_timeout = 0;

-- Run again after an interruption. A concurrent build or drop cut short
-- (a node stopped mid-deploy, a cancelled statement) leaves its index
-- INVALID — never read by the planner, and a unique one not yet ready
-- enforces nothing — and goose records nothing without a transaction, so
-- this migration runs again from the top: IF NOT EXISTS alone would keep
-- such an index, and rename an invalid unique one over the valid partial
-- index it replaces. So an invalid index of this migration's is first set
-- aside under a _leftover name (a rename: catalog only, no table lock an
-- ordinary query waits for) and dropped concurrently, and a valid one is
-- kept rather than built twice. A full runs_idempotency_uq that is valid is
-- this migration's, renamed already: it gets its build name back, so the
-- steps below find it built and the partial index gone. At no point is
-- there no valid index enforcing a run's Idempotency-Key. Leftovers of an
-- earlier rerun go first, so the names are free.
DROP INDEX CONCURRENTLY IF EXISTS thread_messages_run_idx_leftover;
DROP INDEX CONCURRENTLY IF EXISTS runs_idempotency_all_uq_leftover;
DROP INDEX CONCURRENTLY IF EXISTS threads_agent_thread_idx_leftover;
-- +goose StatementBegin
DO $$
DECLARE
    n text;
BEGIN
    FOREACH n IN ARRAY ARRAY['thread_messages_run_idx', 'runs_idempotency_all_uq', 'threads_agent_thread_idx'] LOOP
        IF EXISTS (SELECT FROM pg_index WHERE indexrelid = to_regclass(n) AND NOT indisvalid) THEN
            EXECUTE format('ALTER INDEX %I RENAME TO %I', n, n || '_leftover');
        END IF;
    END LOOP;
    IF to_regclass('runs_idempotency_all_uq') IS NULL AND EXISTS (SELECT FROM pg_index
            WHERE indexrelid = to_regclass('runs_idempotency_uq') AND indisvalid AND indpred IS NULL) THEN
        ALTER INDEX runs_idempotency_uq RENAME TO runs_idempotency_all_uq;
    END IF;
END
$$;
-- +goose StatementEnd
DROP INDEX CONCURRENTLY IF EXISTS thread_messages_run_idx_leftover;
DROP INDEX CONCURRENTLY IF EXISTS runs_idempotency_all_uq_leftover;
DROP INDEX CONCURRENTLY IF EXISTS threads_agent_thread_idx_leftover;

-- The A2A door's task history (RunMessages: WHERE run_id = $1 ORDER BY id)
-- read the whole table: its indexes lead with thread_id.
CREATE INDEX CONCURRENTLY IF NOT EXISTS thread_messages_run_idx ON thread_messages (run_id, id);

-- The retry look-up by Idempotency-Key (provider, agent, key) tied, on a
-- database without statistics, with runs_agent_status_idx (provider, agent,
-- status) and took it: every run of the agent read per request. And a
-- context's tasks (thread, agent) went the same way. The idempotency index
-- now covers every run (a NULL key is no conflict), so it is the one index
-- led by the agent: it serves the look-up, an agent's runs (DeleteAgent,
-- the foreign key from agents) and leaves thread reads to runs_thread_idx.
-- The status column served no query; one index fewer is one write fewer
-- per run.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS runs_idempotency_all_uq ON runs (provider_key, agent_name, idempotency_key);
DROP INDEX CONCURRENTLY IF EXISTS runs_idempotency_uq;
ALTER INDEX runs_idempotency_all_uq RENAME TO runs_idempotency_uq;
DROP INDEX CONCURRENTLY IF EXISTS runs_agent_status_idx;

-- A context's tasks check the agent on the thread's row (thread_id, provider,
-- agent), and that too went through threads_agent_idx (provider, agent) on a
-- database without statistics, reading every thread of the agent. With the
-- thread in the index, whichever index the planner picks reads one row.
CREATE INDEX CONCURRENTLY IF NOT EXISTS threads_agent_thread_idx ON threads (provider_key, agent_name, thread_id);
DROP INDEX CONCURRENTLY IF EXISTS threads_agent_idx;
RESET lock_timeout;

-- +goose Down
-- Rerun-safe as Up is, for its own indexes: an invalid one is set aside
-- and dropped, a valid one kept, and a valid partial runs_idempotency_uq
-- (renamed already) gets its build name back.
SET lock_timeout = 0;
DROP INDEX CONCURRENTLY IF EXISTS threads_agent_idx_leftover;
DROP INDEX CONCURRENTLY IF EXISTS runs_agent_status_idx_leftover;
DROP INDEX CONCURRENTLY IF EXISTS runs_idempotency_part_uq_leftover;
-- +goose StatementBegin
DO $$
DECLARE
    n text;
BEGIN
    FOREACH n IN ARRAY ARRAY['threads_agent_idx', 'runs_agent_status_idx', 'runs_idempotency_part_uq'] LOOP
        IF EXISTS (SELECT FROM pg_index WHERE indexrelid = to_regclass(n) AND NOT indisvalid) THEN
            EXECUTE format('ALTER INDEX %I RENAME TO %I', n, n || '_leftover');
        END IF;
    END LOOP;
    IF to_regclass('runs_idempotency_part_uq') IS NULL AND EXISTS (SELECT FROM pg_index
            WHERE indexrelid = to_regclass('runs_idempotency_uq') AND indisvalid AND indpred IS NOT NULL) THEN
        ALTER INDEX runs_idempotency_uq RENAME TO runs_idempotency_part_uq;
    END IF;
END
$$;
-- +goose StatementEnd
DROP INDEX CONCURRENTLY IF EXISTS threads_agent_idx_leftover;
DROP INDEX CONCURRENTLY IF EXISTS runs_agent_status_idx_leftover;
DROP INDEX CONCURRENTLY IF EXISTS runs_idempotency_part_uq_leftover;
CREATE INDEX CONCURRENTLY IF NOT EXISTS threads_agent_idx ON threads (provider_key, agent_name);
DROP INDEX CONCURRENTLY IF EXISTS threads_agent_thread_idx;
CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_agent_status_idx ON runs (provider_key, agent_name, status);
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS runs_idempotency_part_uq ON runs (provider_key, agent_name, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS runs_idempotency_uq;
ALTER INDEX runs_idempotency_part_uq RENAME TO runs_idempotency_uq;
DROP INDEX CONCURRENTLY IF EXISTS thread_messages_run_idx;
RESET lock_timeout;
