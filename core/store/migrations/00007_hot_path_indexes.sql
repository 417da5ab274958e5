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
-- ordinary query needs, and one that gave up would leave an INVALID index
-- that IF NOT EXISTS then keeps. RESET gives the session back its bound
-- (design.md §Deployment).
SET lock_timeout = 0;

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
SET lock_timeout = 0;
CREATE INDEX CONCURRENTLY IF NOT EXISTS threads_agent_idx ON threads (provider_key, agent_name);
DROP INDEX CONCURRENTLY IF EXISTS threads_agent_thread_idx;
CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_agent_status_idx ON runs (provider_key, agent_name, status);
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS runs_idempotency_part_uq ON runs (provider_key, agent_name, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS runs_idempotency_uq;
ALTER INDEX runs_idempotency_part_uq RENAME TO runs_idempotency_uq;
DROP INDEX CONCURRENTLY IF EXISTS thread_messages_run_idx;
RESET lock_timeout;
