-- +goose Up
-- Whether a run has been counted abandoned or undelivered against the
-- provider that held it (design.md §Counters): a run contributes at most
-- one of the two, whichever funduq saw first. Kept with the run, not in a
-- leader's memory, so a run counted by one leader is not counted again by
-- the next (a takeover, D7). A constant default: catalog only, no rewrite.
ALTER TABLE runs ADD COLUMN holding_counted boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE runs DROP COLUMN holding_counted;
