package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Counter names one persisted quality counter (D6).
type Counter string

const (
	Misdeclared  Counter = "misdeclared"
	Unanswered   Counter = "unanswered"
	AnsweredLate Counter = "answered_late"
	Abandoned    Counter = "abandoned"
	Undelivered  Counter = "undelivered"
	Completions  Counter = "completions"
	Refused      Counter = "refused"
	FailedLLM    Counter = "failed"
)

// AgentCounters are the five agent-provider counters.
var AgentCounters = []Counter{Misdeclared, Unanswered, AnsweredLate, Abandoned, Undelivered}

// Quality is one provider's persisted record.
type Quality struct {
	ProviderKey                                                   string
	Misdeclared, Unanswered, AnsweredLate, Abandoned, Undelivered int64
	Completions, Refused, Failed                                  int64
	WithdrawnAt                                                   *time.Time
}

// Get reads one counter by name.
func (q Quality) Get(c Counter) int64 {
	switch c {
	case Misdeclared:
		return q.Misdeclared
	case Unanswered:
		return q.Unanswered
	case AnsweredLate:
		return q.AnsweredLate
	case Abandoned:
		return q.Abandoned
	case Undelivered:
		return q.Undelivered
	case Completions:
		return q.Completions
	case Refused:
		return q.Refused
	case FailedLLM:
		return q.Failed
	}
	return 0
}

const qualityColumns = `provider_key, misdeclared, unanswered, answered_late, abandoned, undelivered,
	completions, refused, failed, withdrawn_at`

func scanQuality(row pgx.Row) (Quality, error) {
	var q Quality
	err := row.Scan(&q.ProviderKey, &q.Misdeclared, &q.Unanswered, &q.AnsweredLate, &q.Abandoned, &q.Undelivered,
		&q.Completions, &q.Refused, &q.Failed, &q.WithdrawnAt)
	return q, err
}

func validCounter(c Counter) bool {
	switch c {
	case Misdeclared, Unanswered, AnsweredLate, Abandoned, Undelivered, Completions, Refused, FailedLLM:
		return true
	}
	return false
}

// Bump adds one to a provider's counter under the broker's epoch and
// returns the record as it now stands.
func (s *Store) Bump(ctx context.Context, epoch int64, key string, c Counter) (Quality, error) {
	if !validCounter(c) {
		return Quality{}, fmt.Errorf("bump %s: unknown counter %q", key, c)
	}
	var q Quality
	err := s.inTx(ctx, fmt.Sprintf("count %s against %s", c, key), func(tx pgx.Tx) error {
		if err := fence(ctx, tx, epoch); err != nil {
			return err
		}
		var err error
		// The column name comes from the whitelist above, never from input.
		q, err = scanQuality(tx.QueryRow(ctx, `
			INSERT INTO provider_quality (provider_key, `+string(c)+`) VALUES ($1, 1)
			ON CONFLICT (provider_key) DO UPDATE SET `+string(c)+` = provider_quality.`+string(c)+` + 1, updated_at = now()
			RETURNING `+qualityColumns, key))
		return err
	})
	return q, err
}

// BumpForRun is Bump for a counter a run contributes to at most once
// (abandoned, undelivered: design.md §Counters): it counts only when the
// run has not been counted yet, marking it in the same transaction, so a
// run counted under one leader is not counted again under the next.
// counted is false when the run was counted already (q is then the record
// unchanged) or does not exist.
func (s *Store) BumpForRun(ctx context.Context, epoch int64, key string, c Counter, runID string) (q Quality, counted bool, err error) {
	if c != Abandoned && c != Undelivered {
		return Quality{}, false, fmt.Errorf("bump %s for run %s: %q is not counted per run", key, runID, c)
	}
	err = s.inTx(ctx, fmt.Sprintf("count %s against %s for run %s", c, key, runID), func(tx pgx.Tx) error {
		if err := fence(ctx, tx, epoch); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE runs SET holding_counted = true WHERE run_id = $1 AND NOT holding_counted`, runID)
		if err != nil {
			return err
		}
		if counted = tag.RowsAffected() == 1; !counted {
			q, err = scanQuality(tx.QueryRow(ctx, `SELECT `+qualityColumns+` FROM provider_quality WHERE provider_key = $1`, key))
			if err == pgx.ErrNoRows {
				q, err = Quality{ProviderKey: key}, nil
			}
			return err
		}
		q, err = scanQuality(tx.QueryRow(ctx, `
			INSERT INTO provider_quality (provider_key, `+string(c)+`) VALUES ($1, 1)
			ON CONFLICT (provider_key) DO UPDATE SET `+string(c)+` = provider_quality.`+string(c)+` + 1, updated_at = now()
			RETURNING `+qualityColumns, key))
		return err
	})
	return q, counted, err
}

// SetWithdrawn records (or, with withdrawn false, clears) a withdrawal.
func (s *Store) SetWithdrawn(ctx context.Context, epoch int64, key string, withdrawn bool) error {
	return s.inTx(ctx, "record withdrawal of "+key, func(tx pgx.Tx) error {
		if err := fence(ctx, tx, epoch); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `
			INSERT INTO provider_quality (provider_key, withdrawn_at) VALUES ($1, CASE WHEN $2 THEN now() END)
			ON CONFLICT (provider_key) DO UPDATE SET
				withdrawn_at = CASE WHEN $2 THEN now() END, updated_at = now()`, key, withdrawn)
		return err
	})
}

// ClearWithdrawn ends a key's withdrawal, under the broker's epoch, when the
// key came back (a new link registered): its counters stay as they are
// (design.md D6), only the mark that it is out of service goes.
func (s *Store) ClearWithdrawn(ctx context.Context, epoch int64, key string) error {
	return s.inTx(ctx, "end withdrawal of "+key, func(tx pgx.Tx) error {
		if err := fence(ctx, tx, epoch); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE provider_quality SET withdrawn_at = NULL, updated_at = now()
			WHERE provider_key = $1 AND withdrawn_at IS NOT NULL`, key)
		return err
	})
}

// GetQuality reads one provider's record; a provider never counted reads zero.
func (s *Store) GetQuality(ctx context.Context, key string) (Quality, error) {
	q, err := scanQuality(s.pool.QueryRow(ctx, `SELECT `+qualityColumns+` FROM provider_quality WHERE provider_key = $1`, key))
	if err == pgx.ErrNoRows {
		return Quality{ProviderKey: key}, nil
	}
	if err != nil {
		return Quality{}, fmt.Errorf("read quality of %s: %w", key, err)
	}
	return q, nil
}

// QualityPage reads the first limit providers' records, the withdrawn
// ones first, then by key, and how many records there are in all: every
// key ever counted has one, and keys cost a stranger nothing (design.md
// §The provider wire, "Admission"), so the console reads a page of them.
func (s *Store) QualityPage(ctx context.Context, limit int) ([]Quality, int, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+qualityColumns+`, count(*) OVER () FROM provider_quality
		ORDER BY withdrawn_at IS NULL, provider_key LIMIT $1`, limit)
	if err != nil {
		return nil, 0, fmt.Errorf("read quality: %w", err)
	}
	total := 0
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Quality, error) {
		var q Quality
		err := row.Scan(&q.ProviderKey, &q.Misdeclared, &q.Unanswered, &q.AnsweredLate, &q.Abandoned, &q.Undelivered,
			&q.Completions, &q.Refused, &q.Failed, &q.WithdrawnAt, &total)
		return q, err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("read quality: %w", err)
	}
	return list, total, nil
}
