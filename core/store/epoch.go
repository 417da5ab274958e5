package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Leader is the broker_leader row: the fencing token and who holds it.
type Leader struct {
	Epoch        int64
	Holder       string
	AdvertiseURL string
	AcquiredAt   time.Time
}

// AdvanceEpoch makes holder the leader of record under a new epoch and
// returns it. Call it after winning the lease; from then on writes under any
// older epoch are refused. The UPDATE waits for old-leader transactions that
// hold the row FOR SHARE, so none of them lands after the new epoch commits.
func (s *Store) AdvanceEpoch(ctx context.Context, holder string, advertiseURL ...string) (int64, error) {
	var epoch int64
	url := ""
	if len(advertiseURL) > 0 {
		url = advertiseURL[0]
	}
	err := s.pool.QueryRow(ctx,
		`UPDATE broker_leader SET epoch = epoch + 1, holder = $1, advertise_url = $2, acquired_at = now()
		WHERE id = 1 RETURNING epoch`, holder, url).Scan(&epoch)
	if err != nil {
		return 0, fmt.Errorf("advance epoch for %s: %w", holder, err)
	}
	return epoch, nil
}

// CurrentLeader reads the leader of record.
func (s *Store) CurrentLeader(ctx context.Context) (Leader, error) {
	var l Leader
	err := s.pool.QueryRow(ctx, `SELECT epoch, holder, advertise_url, acquired_at FROM broker_leader WHERE id = 1`).
		Scan(&l.Epoch, &l.Holder, &l.AdvertiseURL, &l.AcquiredAt)
	if err != nil {
		return Leader{}, fmt.Errorf("read leader: %w", err)
	}
	return l, nil
}

// fence is the first statement of every broker write transaction: it locks
// the leader row FOR SHARE (so a takeover waits for this transaction) and
// refuses the write when epoch is no longer the leader's.
func fence(ctx context.Context, tx pgx.Tx, epoch int64) error {
	var current int64
	if err := tx.QueryRow(ctx, `SELECT epoch FROM broker_leader WHERE id = 1 FOR SHARE`).Scan(&current); err != nil {
		return fmt.Errorf("fence: %w", err)
	}
	if current != epoch || epoch <= 0 {
		return &StaleEpochError{Have: epoch, Current: current}
	}
	return nil
}
