-- +goose NO TRANSACTION
-- +goose Up
-- The operator console's failures of the last window (RunsOverview:
-- WHERE status = 'failed' AND completed_at > now() - window), polled every
-- 1.5 s, read the whole runs table: no index served it, and with retention
-- off the table only grows (issue 20: a periodic query reads through an
-- index whose leading columns match its predicate).
--
-- Partial on failed runs, so it costs the run hot path nothing a
-- successful run pays: an insert (queued) and every move but the one into
-- 'failed' leave it untouched (PostgreSQL enters a row into a partial index
-- only when the row meets its predicate), and a failed run enters it once,
-- at its end. Its columns change no update's HOT-ness: status is in
-- runs_active_idx's predicate already, and completed_at is written only by
-- a run's end, in the same UPDATE as its status (transition.go,
-- conclude.go). The window reads completed_at alone, not last_activity_at,
-- for that reason: every event batch writes last_activity_at
-- (events.go), and indexing it would make those updates non-HOT.
--
-- Every writer of 'failed' sets completed_at with it; a failed row without
-- one (written by hand) takes its last activity, once, so it is counted as
-- it was before.
--
-- Built CONCURRENTLY without the migration's lock_timeout, as
-- 00007_hot_path_indexes.sql is and for its reasons. A concurrent build
-- interrupted (a node stopped mid-deploy, a cancelled statement) leaves
-- the index behind INVALID, and goose records nothing without a
-- transaction, so this runs again: IF NOT EXISTS alone would take that
-- index for built, and the planner never reads an invalid one. Any
-- runs_failed_idx found here is such a leftover (this migration is not
-- recorded yet): it is dropped, without blocking the table, and built anew.
SET lock_timeout = 0;
UPDATE runs SET completed_at = last_activity_at WHERE status = 'failed' AND completed_at IS NULL;
DROP INDEX CONCURRENTLY IF EXISTS runs_failed_idx;
CREATE INDEX CONCURRENTLY IF NOT EXISTS runs_failed_idx ON runs (completed_at) WHERE status = 'failed';
RESET lock_timeout;

-- +goose Down
SET lock_timeout = 0;
DROP INDEX CONCURRENTLY IF EXISTS runs_failed_idx;
RESET lock_timeout;
