-- +goose Up
-- An agent whose only link was lost without a close frame is expected back
-- until back_until (now() + the link grace, design.md D5). A takeover
-- within that time counts its provider among those expected back, like
-- one served when the previous leader went away, so its runs wait instead
-- of failing agent_offline while it reconnects.
ALTER TABLE agents ADD COLUMN back_until timestamptz;

-- +goose Down
ALTER TABLE agents DROP COLUMN back_until;
