package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// EarlierRoundRepeats reads what the run's earlier rounds stored, for
// provider events the broker kept aside before taking them (design.md D7,
// "A resend read before register"): earlier is whether the run has a round
// before its current one (it paused and was answered: round_seq is past
// 0), and repeats[i] whether an earlier round stored evs[i] — an event
// under the same provider seq with the same JSON value (SameEvent). An event
// without a provider seq repeats nothing here: the store cannot tell it
// (D7). A provider numbers each round from 1 again, so a stale resend of
// an earlier round is known only this way; a seq is matched within the
// current round everywhere else (AppendProviderEvents).
func (s *Store) EarlierRoundRepeats(ctx context.Context, runID string, evs []NewEvent) (earlier bool, repeats []bool, err error) {
	repeats = make([]bool, len(evs))
	var idx []int32
	var pseqs []int64
	var texts []string
	for i, e := range evs {
		if e.ProviderSeq != nil {
			idx = append(idx, int32(i))
			pseqs = append(pseqs, *e.ProviderSeq)
			texts = append(texts, string(e.Event))
		}
	}
	// One index probe of (run_id, provider_seq) per seq, as queueDedupe.
	// An event stored under the seq with the same text is a repeat (its
	// text is not sent back: NULL); another text is compared here as a
	// JSON value (SameEvent), so a resend written otherwise repeats too.
	rows, err := s.pool.Query(ctx, `SELECT r.round_seq > 0, k.i, k.ev FROM runs r
		LEFT JOIN LATERAL (SELECT k.i, CASE WHEN e.event::text = k.ev THEN NULL ELSE e.event::text END AS ev
			FROM unnest($2::int[], $3::bigint[], $4::text[]) AS k(i, s, ev)
			JOIN run_events e ON e.run_id = r.run_id AND e.provider_seq = k.s AND e.seq <= r.round_seq) AS k ON true
		WHERE r.run_id = $1`, runID, idx, pseqs, texts)
	if err != nil {
		return false, nil, fmt.Errorf("read the earlier rounds of run %s: %w", runID, err)
	}
	found := false
	var i *int32
	var stored *string
	_, err = pgx.ForEachRow(rows, []any{&earlier, &i, &stored}, func() error {
		found = true
		if i != nil && int(*i) < len(repeats) && !repeats[*i] {
			repeats[*i] = stored == nil || SameEvent([]byte(*stored), evs[*i].Event)
		}
		return nil
	})
	if err != nil {
		return false, nil, fmt.Errorf("read the earlier rounds of run %s: %w", runID, err)
	}
	if !found {
		return false, nil, fmt.Errorf("read the earlier rounds of run %s: %w", runID, ErrNotFound)
	}
	return earlier, repeats, nil
}
