-- +goose Up
-- The shared record of funduq: doors insert threads, runs and caller messages;
-- the leading broker moves runs through their statuses (every write fenced by
-- its epoch in broker_leader) and appends their events.

CREATE TABLE providers (
    public_key    text PRIMARY KEY CHECK (public_key ~ '^[0-9a-f]{64}$'),
    fingerprint   text NOT NULL UNIQUE CHECK (fingerprint ~ '^[0-9a-f]{16}$'),
    display_name  text,
    first_seen_at timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- An agent is (provider key, name); funduq mints no identifier for it.
-- served_epoch names the broker epoch whose roster serves the agent right
-- now (NULL = nobody); a row served by an older epoch is not served.
CREATE TABLE agents (
    provider_key        text NOT NULL REFERENCES providers (public_key),
    name                text NOT NULL CHECK (name ~ '^[A-Za-z0-9_-]{1,128}$'),
    description         text NOT NULL DEFAULT '',
    agent_card_extra    jsonb NOT NULL DEFAULT '{}',
    metadata            jsonb NOT NULL DEFAULT '{}',
    takes_interjections boolean NOT NULL DEFAULT false,
    served_epoch        bigint,
    unserved_since      timestamptz,
    joined_at           timestamptz NOT NULL DEFAULT now(),
    last_seen_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (provider_key, name)
);

-- A KYOK offering is (provider key, model name).
CREATE TABLE llm_offerings (
    provider_key text NOT NULL REFERENCES providers (public_key),
    name         text NOT NULL CHECK (length(name) BETWEEN 1 AND 256),
    metadata     jsonb NOT NULL DEFAULT '{}',
    served_epoch bigint,
    joined_at    timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (provider_key, name)
);

CREATE TABLE threads (
    thread_id        text PRIMARY KEY,
    provider_key     text NOT NULL,
    agent_name       text NOT NULL,
    parent_thread_id text REFERENCES threads (thread_id),
    head_key         text,
    metadata         jsonb NOT NULL DEFAULT '{}',
    created_at       timestamptz NOT NULL DEFAULT now(),
    last_activity_at timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (provider_key, agent_name) REFERENCES agents (provider_key, name)
);
CREATE INDEX threads_parent_idx ON threads (parent_thread_id) WHERE parent_thread_id IS NOT NULL;
CREATE INDEX threads_agent_idx ON threads (provider_key, agent_name);

-- A run is one AG-UI run. run_input holds the exact RunAgentInput the
-- provider is offered (json, not jsonb, so its bytes and key order survive).
CREATE TABLE runs (
    run_id              text PRIMARY KEY,
    thread_id           text NOT NULL REFERENCES threads (thread_id),
    provider_key        text NOT NULL,
    agent_name          text NOT NULL,
    status              text NOT NULL CHECK (status IN ('queued', 'offering', 'running', 'cancelling',
                                                        'input-required', 'completed', 'failed', 'cancelled')),
    failure_reason      text,
    run_input           json NOT NULL,
    parent_run_id       text,
    actor_chain         jsonb,
    interrupt           jsonb,
    caller_request_id   text,
    idempotency_key     text,
    cancel_requested_by text,
    cancel_requested_at timestamptz,
    owner_epoch         bigint,
    last_seq            integer NOT NULL DEFAULT 0,
    created_at          timestamptz NOT NULL DEFAULT now(),
    queued_at           timestamptz NOT NULL DEFAULT now(),
    started_at          timestamptz,
    completed_at        timestamptz,
    last_activity_at    timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (provider_key, agent_name) REFERENCES agents (provider_key, name),
    CHECK ((status = 'failed') = (failure_reason IS NOT NULL))
);
CREATE INDEX runs_thread_idx ON runs (thread_id, created_at, run_id);
CREATE INDEX runs_active_idx ON runs (status, queued_at, run_id)
    WHERE status IN ('queued', 'offering', 'running', 'cancelling');
CREATE INDEX runs_agent_status_idx ON runs (provider_key, agent_name, status);
-- A retried request creates nothing twice (D13): the AG-UI caller's runId or
-- the A2A messageId per thread, and an Idempotency-Key per agent.
CREATE UNIQUE INDEX runs_caller_request_uq ON runs (thread_id, caller_request_id)
    WHERE caller_request_id IS NOT NULL;
CREATE UNIQUE INDEX runs_idempotency_uq ON runs (provider_key, agent_name, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

CREATE TABLE thread_messages (
    id         bigserial PRIMARY KEY,
    thread_id  text NOT NULL REFERENCES threads (thread_id),
    run_id     text NOT NULL REFERENCES runs (run_id),
    message_id text NOT NULL,
    message    json NOT NULL,
    origin     text NOT NULL CHECK (origin IN ('caller', 'agent')),
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (thread_id, message_id)
);
CREATE INDEX thread_messages_thread_idx ON thread_messages (thread_id, id);

-- Events are durable before they are visible anywhere (D9). seq is per run,
-- 1, 2, 3…; provider_seq is our provider SDK's optional resend guard (D7).
CREATE TABLE run_events (
    id           bigserial PRIMARY KEY,
    run_id       text NOT NULL REFERENCES runs (run_id),
    seq          integer NOT NULL CHECK (seq > 0),
    event        json NOT NULL,
    provider_seq bigint,
    created_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (run_id, seq)
);
CREATE UNIQUE INDEX run_events_provider_seq_uq ON run_events (run_id, provider_seq)
    WHERE provider_seq IS NOT NULL;

-- The fencing token (D10): the Redis lease decides who should lead, this row
-- decides whose writes land. A new leader advances epoch; every broker write
-- first reads it FOR SHARE and aborts when it is not its own.
CREATE TABLE broker_leader (
    id          integer PRIMARY KEY CHECK (id = 1),
    epoch       bigint NOT NULL DEFAULT 0,
    holder      text NOT NULL DEFAULT '',
    acquired_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO broker_leader (id, epoch, holder) VALUES (1, 0, '');

-- Quality counters survive restarts and failovers (D6).
CREATE TABLE provider_quality (
    provider_key  text PRIMARY KEY REFERENCES providers (public_key),
    misdeclared   bigint NOT NULL DEFAULT 0,
    unanswered    bigint NOT NULL DEFAULT 0,
    answered_late bigint NOT NULL DEFAULT 0,
    abandoned     bigint NOT NULL DEFAULT 0,
    undelivered   bigint NOT NULL DEFAULT 0,
    completions   bigint NOT NULL DEFAULT 0,
    refused       bigint NOT NULL DEFAULT 0,
    failed        bigint NOT NULL DEFAULT 0,
    withdrawn_at  timestamptz,
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE provider_quality;
DROP TABLE broker_leader;
DROP TABLE run_events;
DROP TABLE thread_messages;
DROP TABLE runs;
DROP TABLE threads;
DROP TABLE llm_offerings;
DROP TABLE agents;
DROP TABLE providers;
