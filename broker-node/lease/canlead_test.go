package lease_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/lease"
	"github.com/funduq/funduq-go/core/redistest"
)

// A node that cannot lead (its PostgreSQL out of reach, design.md D13)
// does not campaign while CanLead says so, though the lease is free; once
// CanLead answers, it campaigns and leads.
func TestElectorCampaignsOnlyWhenItCanLead(t *testing.T) {
	rdb, prefix := redistest.Client(t)
	var able atomic.Bool
	asked := make(chan struct{}, 64)
	a := startElectorWith(t, rdb, prefix, "a", 10*time.Second, func(e *lease.Elector) {
		e.RetryEvery = 20 * time.Millisecond
		e.CanLead = func(ctx context.Context) error {
			defer func() { asked <- struct{}{} }()
			if able.Load() {
				return nil
			}
			return errors.New("PostgreSQL unreachable")
		}
	})
	// The second question follows a whole round of the loop after the
	// first was answered no: any campaign of that round is over.
	wait(t, asked, "a asks whether it can lead")
	wait(t, asked, "a asks again")
	if h, err := lease.ReadHolder(context.Background(), rdb, prefix+"lease"); !errors.Is(err, lease.ErrNoHolder) {
		t.Fatalf("a node that cannot lead campaigned: holder %+v, %v", h, err)
	}
	select {
	case <-a.led:
		t.Fatal("a node that cannot lead led")
	default:
	}
	able.Store(true)
	wait(t, a.led, "a leads once it can")
}
