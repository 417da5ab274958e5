-- +goose Up
-- The run an interjection addresses, written by the door beside the run's
-- input so the broker reads it as a column instead of parsing it back out
-- of run_input (design.md, the run input's funduq additions). NULL for an
-- ordinary turn.
ALTER TABLE runs ADD COLUMN addressed_run_id text;

-- Runs written before this column have it only in their input. The
-- look-up is guarded: run_input is json, kept as sent, and a string with
-- \u0000 or a lone surrogate makes ->> raise; such an input was never
-- written by a door's builder with an addressed run, so it stays NULL.
-- +goose StatementBegin
CREATE FUNCTION pg_temp.funduq_addressed_run_id(input json) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
	RETURN nullif(input -> 'forwardedProps' -> 'funduq' ->> 'addressedRunId', '');
EXCEPTION WHEN others THEN
	RETURN NULL;
END
$$;
-- +goose StatementEnd

UPDATE runs SET addressed_run_id = pg_temp.funduq_addressed_run_id(run_input)
WHERE run_input::text LIKE '%"addressedRunId"%';

DROP FUNCTION pg_temp.funduq_addressed_run_id(json);

-- +goose Down
ALTER TABLE runs DROP COLUMN addressed_run_id;
