-- +goose Up
-- funduq's public identity key as the leader of record holds it, written
-- when it takes the epoch (design.md §Deployment, "One identity key"). The
-- doors read it with the agent they look up and refuse to sign a bound
-- run's dispatch hop with another key. '' until a leader of this release
-- has taken an epoch. broker_leader is one row, and a constant default is
-- catalog only: no rewrite.
ALTER TABLE broker_leader ADD COLUMN funduq_key text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE broker_leader DROP COLUMN funduq_key;
