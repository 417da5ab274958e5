package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Leader is the broker_leader row: the fencing token and who holds it.
type Leader struct {
	Epoch        int64
	Holder       string
	AdvertiseURL string
	AcquiredAt   time.Time
	// FunduqKey is funduq's public identity key as the leader of record
	// published it (Takeover.FunduqKey); "" before any leader has.
	FunduqKey string
}

// Takeover is what a node records as it becomes the leader of record.
type Takeover struct {
	Holder       string
	AdvertiseURL string
	// FunduqKey is the node's public identity key, published for the doors
	// (design.md §Deployment, "One identity key"); "" keeps the key
	// published before.
	FunduqKey string
}

// TookOver is a takeover's outcome.
type TookOver struct {
	Epoch int64
	// PreviousKey is the key published before this takeover ("" when none
	// was), so a node whose key differs can say so.
	PreviousKey string
}

// takeoverLockWait bounds how long a takeover waits for the deposed
// leader's fenced transactions before ending them.
const takeoverLockWait = time.Second

// AdvanceEpoch makes holder the leader of record under a new epoch and
// returns it. Call it after winning the lease; from then on writes under any
// older epoch are refused. The UPDATE waits for old-leader transactions that
// hold the row FOR SHARE, so none of them lands after the new epoch commits.
//
// That wait is bounded: a deposed leader frozen or cut off mid-transaction
// keeps its lock for as long as PostgreSQL believes its connection (hours,
// for a half-open TCP connection), which would stall every takeover. After
// takeoverLockWait the backends holding fenced transactions (RowShareLock on
// broker_leader, which only fence takes) are terminated: their work is a
// deposed leader's, and rolling it back is what fencing asks for.
func (s *Store) AdvanceEpoch(ctx context.Context, holder string, advertiseURL ...string) (int64, error) {
	url := ""
	if len(advertiseURL) > 0 {
		url = advertiseURL[0]
	}
	t, err := s.TakeOver(ctx, Takeover{Holder: holder, AdvertiseURL: url})
	return t.Epoch, err
}

// TakeOver is AdvanceEpoch that also publishes the node's identity key
// (t.FunduqKey, when set) in the same UPDATE, and returns the key published
// before it.
func (s *Store) TakeOver(ctx context.Context, t Takeover) (TookOver, error) {
	holder := t.Holder
	for attempt := 1; ; attempt++ {
		took, err := s.advanceEpoch(ctx, t)
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55P03" || attempt == 5 {
			if err != nil {
				return TookOver{}, fmt.Errorf("advance epoch for %s: %w", holder, err)
			}
			return took, nil
		}
		var ended int
		// pg_locks lists every database's locks, and databases made from
		// one schema share broker_leader's OID: only this database's.
		if err := s.pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(l.pid)) FROM pg_locks l
			WHERE l.locktype = 'relation' AND l.relation = 'broker_leader'::regclass AND l.mode = 'RowShareLock'
			AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
			AND l.granted AND l.pid <> pg_backend_pid()`).Scan(&ended); err != nil {
			return TookOver{}, fmt.Errorf("advance epoch for %s: end the deposed leader's transactions: %w", holder, err)
		}
		s.log.WarnContext(ctx, "takeover waited on fenced transactions of a deposed leader; ended them",
			"holder", holder, "backends", ended, "waited", takeoverLockWait.String())
	}
}

func (s *Store) advanceEpoch(ctx context.Context, t Takeover) (TookOver, error) {
	var took TookOver
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", takeoverLockWait.Milliseconds())); err != nil {
			return err
		}
		// The row is locked first, as the UPDATE locks it, so the key read
		// as the previous one is the row's latest, not a snapshot another
		// takeover has since replaced.
		return tx.QueryRow(ctx,
			`WITH old AS (SELECT funduq_key FROM broker_leader WHERE id = 1 FOR NO KEY UPDATE)
			UPDATE broker_leader SET epoch = epoch + 1, holder = $1, advertise_url = $2, acquired_at = now(),
				funduq_key = CASE WHEN $3 = '' THEN broker_leader.funduq_key ELSE $3 END
			FROM old WHERE id = 1 RETURNING epoch, old.funduq_key`, t.Holder, t.AdvertiseURL, t.FunduqKey).
			Scan(&took.Epoch, &took.PreviousKey)
	})
	return took, err
}

// CurrentLeader reads the leader of record.
func (s *Store) CurrentLeader(ctx context.Context) (Leader, error) {
	var l Leader
	err := s.pool.QueryRow(ctx, `SELECT epoch, holder, advertise_url, acquired_at, funduq_key FROM broker_leader WHERE id = 1`).
		Scan(&l.Epoch, &l.Holder, &l.AdvertiseURL, &l.AcquiredAt, &l.FunduqKey)
	if err != nil {
		return Leader{}, fmt.Errorf("read leader: %w", err)
	}
	return l, nil
}

// fenceSQL is the fence (D10), the one locking read of the leader's epoch
// every broker write makes: FOR SHARE, so a takeover's AdvanceEpoch waits
// for the writing transaction and no write lands under an epoch already
// replaced. fence runs it alone; the event writes and the moves embed it
// as a CTE in their first statement, so it costs no round trip of its own.
const fenceSQL = `SELECT epoch FROM broker_leader WHERE id = 1 FOR SHARE`

// fence is the first statement of every broker write transaction: it locks
// the leader row FOR SHARE (so a takeover waits for this transaction) and
// refuses the write when epoch is no longer the leader's.
func fence(ctx context.Context, tx pgx.Tx, epoch int64) error {
	var current int64
	if err := tx.QueryRow(ctx, fenceSQL).Scan(&current); err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	return fenced(epoch, current)
}

// fenced is the fence's verdict: a writer holding epoch may write while the
// leader row reads current.
func fenced(epoch, current int64) error {
	if current != epoch || epoch <= 0 {
		return &StaleEpochError{Have: epoch, Current: current}
	}
	return nil
}

// Heartbeat records that the leader of epoch is alive for ttl from now (the
// broker_heartbeat row): GET /agents says online only while it is (D8).
// An older epoch's heartbeat never overwrites a newer one's; ttl 0 says the
// leader stopped leading.
func (s *Store) Heartbeat(ctx context.Context, epoch int64, ttl time.Duration) error {
	_, err := s.pool.Exec(ctx, `UPDATE broker_heartbeat SET epoch = $1,
		alive_until = now() + make_interval(secs => $2::float8 / 1000)
		WHERE id = 1 AND epoch <= $1`, epoch, ttl.Milliseconds())
	if err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	return nil
}
