package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/funduq/funduq-go/core/backoff"
)

// maxAttempts bounds retries of a whole transaction (design.md D13: at most three).
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

// txBackoff paces the retries of a transient failure: the wait before
// attempt n (n ≥ 2) is Delay(n-1), 50 ms, 200 ms, … (×4) with up to 50%
// jitter added so retrying writers do not collide again in step. With
// maxAttempts = 3 only 50 ms and 200 ms are ever waited; Max is that last.
var txBackoff = backoff.Policy{Min: 50 * time.Millisecond, Max: 200 * time.Millisecond, Factor: 4, Jitter: 0.5, Spread: backoff.Over}

// inTx runs fn in a transaction, committing when it returns nil. Transient
// failures are retried with backoff; fn must therefore be safe to repeat.
func (s *Store) inTx(ctx context.Context, what string, fn func(pgx.Tx) error) error {
	return s.retry(ctx, what, func() error { return pgx.BeginFunc(ctx, s.pool, fn) })
}

// retry runs attempt until it succeeds, fails for good, or maxAttempts
// transient failures have happened; attempt must be safe to repeat (a
// single statement, or a transaction that rolled back).
func (s *Store) retry(ctx context.Context, what string, attempt func() error) error {
	var err error
	for n := 1; n <= maxAttempts; n++ {
		if n > 1 {
			t := time.NewTimer(txBackoff.Delay(n - 1))
			select {
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("%s: %w (after %v)", what, ctx.Err(), err)
			case <-t.C:
			}
			s.log.WarnContext(ctx, "retrying transaction", "op", what, "attempt", n, "err", err)
		}
		err = attempt()
		if err == nil || !retryable(err) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// pipelined runs a transaction as two pipelined round trips instead of one
// per statement: first BEGIN and the reads a decision needs (queued by
// first, their results scanned by its callbacks), then — when decide
// returns nil — the writes (queued by second) and COMMIT. A refused
// decision or any failure rolls back. Transient failures are retried like
// inTx; the callbacks must therefore be safe to repeat. With first nil the
// whole transaction is one round trip.
func (s *Store) pipelined(ctx context.Context, what string, first func(*pgx.Batch), decide func() error, second func(*pgx.Batch)) error {
	return s.retry(ctx, what, func() error {
		conn, err := s.pool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer conn.Release()
		rollback := func() {
			if pc := conn.Conn().PgConn(); !pc.IsClosed() && pc.TxStatus() != 'I' {
				// A connection left inside a transaction must not go back
				// to the pool: roll back, and close it if that fails.
				if _, err := conn.Exec(context.WithoutCancel(ctx), "ROLLBACK"); err != nil {
					_ = conn.Conn().Close(context.WithoutCancel(ctx))
				}
			}
		}
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		if first != nil {
			first(b)
			if err := conn.SendBatch(ctx, b).Close(); err != nil {
				rollback()
				return err
			}
			if err := decide(); err != nil {
				rollback()
				return err
			}
			b = &pgx.Batch{}
		}
		second(b)
		b.Queue("COMMIT")
		if err := conn.SendBatch(ctx, b).Close(); err != nil {
			rollback()
			return err
		}
		if conn.Conn().PgConn().TxStatus() != 'I' {
			rollback()
			return errors.New("transaction still open after COMMIT")
		}
		if f := s.faults.Load(); f != nil && f.AfterCommit != nil {
			if err := f.AfterCommit(what); err != nil {
				_ = conn.Conn().Close(context.WithoutCancel(ctx))
				return fmt.Errorf("connection lost after COMMIT (injected): %w", err)
			}
		}
		return nil
	})
}
