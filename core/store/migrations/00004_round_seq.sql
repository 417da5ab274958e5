-- +goose Up
-- A provider's own event seq (D7) numbers the events of one delivery: a run
-- reopened after a pause is delivered again and numbered from 1 again. So a
-- resend is recognised within the current round only: round_seq is the run's
-- last seq when its provider claimed it this round.
ALTER TABLE runs ADD COLUMN round_seq integer NOT NULL DEFAULT 0;
DROP INDEX run_events_provider_seq_uq;
CREATE INDEX run_events_provider_seq_idx ON run_events (run_id, provider_seq) WHERE provider_seq IS NOT NULL;

-- +goose Down
DROP INDEX run_events_provider_seq_idx;
CREATE UNIQUE INDEX run_events_provider_seq_uq ON run_events (run_id, provider_seq) WHERE provider_seq IS NOT NULL;
ALTER TABLE runs DROP COLUMN round_seq;
