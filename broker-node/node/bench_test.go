package node_test

import (
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
)

// BenchmarkOffer is the lane's try/offer path on a real node, PostgreSQL and
// WebSocket: a door's insert+NOTIFY, intake, the try predicate, the
// offering write and the run frame at the provider (one op), then the
// accept and a short answer so the next op starts from an idle provider.
func BenchmarkOffer(b *testing.B) {
	h := nodetest.Start(b, nil)
	p := h.Connect(0xe3, nil)
	p.Register("echo")
	b.ResetTimer()
	for b.Loop() {
		id, thread := h.Door(p.Key, "echo", "", "hi")
		p.Offer()
		b.StopTimer()
		p.Accept(id)
		p.Complete(id, thread)
		h.WaitStatus(id, run.Completed)
		b.StartTimer()
	}
}

// BenchmarkRun is a whole short run (offer, accept, five events, finish,
// conclude) as one op.
func BenchmarkRun(b *testing.B) {
	h := nodetest.Start(b, nil)
	p := h.Connect(0xe4, nil)
	p.Register("echo")
	for b.Loop() {
		h.CompletedRun(p, "echo", "hi")
	}
}
