-- +goose Up
-- The leader's liveness, for readers that do not hold the Redis lease (a
-- door's GET /agents): the leader of record writes alive_until = now() +
-- its lease TTL on taking the epoch and on every renewal, and now() when it
-- stops leading. "Online" is an agent served under the current epoch while
-- that epoch's heartbeat is alive (design.md D8, D10). A table of its own:
-- broker_leader's row is held FOR SHARE by every fenced write, and a
-- heartbeat UPDATE there would queue behind them and stall them.
CREATE TABLE broker_heartbeat (
    id          int PRIMARY KEY CHECK (id = 1),
    epoch       bigint NOT NULL,
    alive_until timestamptz NOT NULL
);
INSERT INTO broker_heartbeat (id, epoch, alive_until) VALUES (1, 0, '-infinity');

-- +goose Down
DROP TABLE broker_heartbeat;
