-- +goose Up
-- Who may read and retry (D16, D17). A bound thread's parties include the
-- presenter that opened it; a retried request is matched within its caller
-- and compared with the request that made the run (a key reused for another
-- request is refused, never answered with that run); a retried answer
-- streams the round it opened, from the seq the run had reached before it.
ALTER TABLE threads ADD COLUMN presenter_key text;
ALTER TABLE runs ADD COLUMN request_hash text;
ALTER TABLE answer_requests ADD COLUMN request_hash text;
ALTER TABLE answer_requests ADD COLUMN after_seq integer NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE answer_requests DROP COLUMN after_seq;
ALTER TABLE answer_requests DROP COLUMN request_hash;
ALTER TABLE runs DROP COLUMN request_hash;
ALTER TABLE threads DROP COLUMN presenter_key;
