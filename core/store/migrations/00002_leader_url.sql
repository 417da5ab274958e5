-- +goose Up
-- Standbys tell providers where the leader is (D11): the leader records the
-- URL it advertises when it takes the epoch.
ALTER TABLE broker_leader ADD COLUMN advertise_url text NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE broker_leader DROP COLUMN advertise_url;
