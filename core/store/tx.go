package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// maxAttempts bounds retries of a whole transaction (seed 002: at most three).
const maxAttempts = 3

// retryable reports whether err is a transient failure after which the whole
// transaction may safely run again: a serialization failure or deadlock (the
// transaction was rolled back), or a connection error pgx knows happened
// before anything was sent.
func retryable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == "40001" || pgErr.Code == "40P01"
	}
	return pgconn.SafeToRetry(err)
}

// backoff is the wait before attempt n (n ≥ 2): 50 ms, 200 ms, … with up to
// 50% jitter so retrying writers do not collide again in step.
func backoff(n int) time.Duration {
	base := 50 * time.Millisecond << (2 * (n - 2))
	return base + time.Duration(rand.Int64N(int64(base/2)+1))
}

// inTx runs fn in a transaction, committing when it returns nil. Transient
// failures are retried with backoff; fn must therefore be safe to repeat.
func (s *Store) inTx(ctx context.Context, what string, fn func(pgx.Tx) error) error {
	var err error
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		if attempt > 1 {
			t := time.NewTimer(backoff(attempt))
			select {
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("%s: %w (after %v)", what, ctx.Err(), err)
			case <-t.C:
			}
			s.log.WarnContext(ctx, "retrying transaction", "op", what, "attempt", attempt, "err", err)
		}
		err = pgx.BeginFunc(ctx, s.pool, fn)
		if err == nil || !retryable(err) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}
