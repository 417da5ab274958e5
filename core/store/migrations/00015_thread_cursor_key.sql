-- +goose NO TRANSACTION
-- +goose Up
-- Each thread's own key for sealing its snapshot page cursors
-- (design.md §The doors, "A thread snapshot is one bounded page"): a
-- cursor names a thread_messages.id, a sequence every thread shares, so
-- sent in the clear two of a thread's cursors would tell its parties how
-- many messages other threads gained between them. The key is never sent.
-- 32 bytes from two gen_random_uuid() (built in since PostgreSQL 13, drawn
-- from pg_strong_random; 244 random bits), so no extension is needed. The
-- default is volatile: every insert path gets a key of its own per row
-- without naming the column.
--
-- Without rewriting threads: a volatile default given in ADD COLUMN
-- rewrites the table and its indexes under an ACCESS EXCLUSIVE lock, and
-- every door reading or writing a thread waits for it (as 00007 builds its
-- indexes CONCURRENTLY). So, each step committed on its own: the column
-- and its default for new rows (catalog only), the existing threads' keys
-- in batches along the primary key (row locks, held one batch at a time),
-- the size check added NOT VALID and validated (reads and writes go on),
-- then NOT NULL, which the valid check proves without a scan. Every step
-- can run again, so a migration stopped part way finishes when rerun.
ALTER TABLE threads ADD COLUMN IF NOT EXISTS cursor_key bytea,
    ALTER COLUMN cursor_key SET DEFAULT uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid());

-- +goose StatementBegin
DO $$
DECLARE
    batch text[];
    last text := '';
BEGIN
    LOOP
        batch := ARRAY(SELECT thread_id FROM threads WHERE thread_id > last ORDER BY thread_id LIMIT 5000);
        EXIT WHEN cardinality(batch) = 0;
        UPDATE threads SET cursor_key = DEFAULT WHERE thread_id = ANY (batch) AND cursor_key IS NULL;
        last := batch[cardinality(batch)];
        COMMIT;
    END LOOP;
    -- Whatever the walk cannot reach (a thread_id of '', not above the
    -- first bound): one scan, locking only what it fills.
    UPDATE threads SET cursor_key = DEFAULT WHERE cursor_key IS NULL;
END
$$;
-- +goose StatementEnd

ALTER TABLE threads DROP CONSTRAINT IF EXISTS threads_cursor_key_size,
    ADD CONSTRAINT threads_cursor_key_size CHECK (cursor_key IS NOT NULL AND octet_length(cursor_key) = 32) NOT VALID;

ALTER TABLE threads VALIDATE CONSTRAINT threads_cursor_key_size;

ALTER TABLE threads ALTER COLUMN cursor_key SET NOT NULL;

-- +goose Down
ALTER TABLE threads DROP COLUMN IF EXISTS cursor_key;
