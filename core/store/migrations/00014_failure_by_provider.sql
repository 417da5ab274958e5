-- +goose Up
-- Whose words a failed run's failure_reason is: true when the provider
-- wrote it (its refusal's reason, its own RUN_ERROR's code or message),
-- false when funduq did. A provider may choose any text, funduq's reason
-- names included, so the text alone cannot say (design.md §The operator
-- console, whose failure reason). Written by the run's end in the same
-- UPDATE as the reason.
ALTER TABLE runs ADD COLUMN failure_by_provider boolean NOT NULL DEFAULT false;
ALTER TABLE runs ADD CONSTRAINT runs_failure_by_provider_failed
    CHECK (NOT failure_by_provider OR status = 'failed');

-- Runs that failed before this column: a reason funduq never authors was
-- the provider's. One in funduq's own words cannot be told apart and
-- stays funduq's, as it was shown until now.
UPDATE runs SET failure_by_provider = true
WHERE status = 'failed' AND failure_reason NOT IN (
    'agent_offline', 'no_provider_took_it', 'provider_left_holding_it',
    'provider_stream_ended_without_finishing', 'provider sent a malformed AG-UI event',
    'provider_exceeded_event_limit', 'provider_sent_an_oversized_event',
    'orphaned_by_funduq_restart', 'interjection_target_lost', 'paused_no_resume',
    'provider_did_not_answer', 'stalled_no_activity');

-- +goose Down
ALTER TABLE runs DROP COLUMN failure_by_provider;
