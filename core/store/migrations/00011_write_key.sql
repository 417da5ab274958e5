-- +goose Up
-- A broker write that may have committed before its answer was lost is
-- retried with the same key (design.md D13): the run records the key of
-- the last write that stored events for it and the seqs that write gave
-- them, so the retry finds its own commit and stores nothing twice, even
-- for events that carry no provider seq.
ALTER TABLE runs ADD COLUMN write_key text, ADD COLUMN write_seqs int[];

-- +goose Down
ALTER TABLE runs DROP COLUMN write_key, DROP COLUMN write_seqs;
