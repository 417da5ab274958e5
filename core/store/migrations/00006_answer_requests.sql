-- +goose Up
-- An answer reopens a paused run under its own id (D1), so the answer's
-- caller request id (the A2A messageId, the AG-UI caller's runId) cannot
-- live in the run's row, which already holds the first request's. Kept here,
-- so a retried answer finds the run it reopened (D13).
CREATE TABLE answer_requests (
    thread_id         text NOT NULL REFERENCES threads (thread_id),
    caller_request_id text NOT NULL,
    run_id            text NOT NULL REFERENCES runs (run_id),
    created_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (thread_id, caller_request_id)
);

-- +goose Down
DROP TABLE answer_requests;
