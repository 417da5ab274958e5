-- +goose Up
-- KYOK (issue 7): a run's binding to the caller's LLM offering. The
-- binding's content (the offering and the caller's context) is sealed with
-- AES-256-GCM under a key derived from FUNDUQ_TOKEN_SECRET (core/kyok), so
-- the context is never stored readable. The offering it names is also kept
-- in the clear (it is no secret) so deleteModel can be refused while a live
-- run is bound to it. The broker drops all three when the run ends.
ALTER TABLE runs ADD COLUMN kyok_binding bytea;
ALTER TABLE runs ADD COLUMN kyok_llm_provider_key text;
ALTER TABLE runs ADD COLUMN kyok_llm_name text;
ALTER TABLE runs ADD CONSTRAINT runs_kyok_binding_whole CHECK (
    (kyok_binding IS NULL) = (kyok_llm_provider_key IS NULL)
    AND (kyok_binding IS NULL) = (kyok_llm_name IS NULL));
CREATE INDEX runs_kyok_offering_idx ON runs (kyok_llm_provider_key, kyok_llm_name)
    WHERE kyok_binding IS NOT NULL;

-- +goose Down
DROP INDEX runs_kyok_offering_idx;
ALTER TABLE runs DROP CONSTRAINT runs_kyok_binding_whole;
ALTER TABLE runs DROP COLUMN kyok_llm_name;
ALTER TABLE runs DROP COLUMN kyok_llm_provider_key;
ALTER TABLE runs DROP COLUMN kyok_binding;
