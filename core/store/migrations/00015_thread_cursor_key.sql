-- +goose Up
-- Each thread's own key for sealing its snapshot page cursors
-- (design.md §The doors, "A thread snapshot is one bounded page"): a
-- cursor names a thread_messages.id, a sequence every thread shares, so
-- sent in the clear two of a thread's cursors would tell its parties how
-- many messages other threads gained between them. The key is never sent.
-- 32 bytes from two gen_random_uuid() (built in since PostgreSQL 13, drawn
-- from pg_strong_random; 244 random bits), so no extension is needed. The
-- default is volatile: adding the column gives every existing thread its
-- own key, and every insert path gets one without naming the column.
ALTER TABLE threads ADD COLUMN cursor_key bytea NOT NULL
    DEFAULT uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid())
    CONSTRAINT threads_cursor_key_size CHECK (octet_length(cursor_key) = 32);

-- +goose Down
ALTER TABLE threads DROP COLUMN cursor_key;
