package node_test

import (
	"log/slog"
	"testing"

	"github.com/funduq/funduq-go/broker-node/node"
	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/internal/syncbuf"
)

// An operator's walk-through of the README: `scripts/lease handover`
// before a deploy is routine, and the leader that hands over must not log
// it as an error. Before the fix it logged two ERRORs, "broker stopped
// leading" and "kyok relay stopped", both with err "handing over the lease
// on request", beside the INFO lines that already say why leadership
// ended; an operator grepping for ERROR found every deploy.
func TestHandoverLogsNoError(t *testing.T) {
	logs := &syncbuf.Buffer{}
	a := nodetest.StartWith(t, nil, func(o *node.Options) { o.Logger = slog.New(slog.NewJSONHandler(logs, nil)) })
	b := a.Peer("node-b")
	p := a.Connect(0xa3, nil)
	p.Register("echo")
	p.Barrier()

	requestHandover(t, a)
	b.Eventually("the standby leads", b.Ready)
	// The elector logs "leadership ended" once the leader's work (broker
	// and KYOK relay) has returned and logged how it ended.
	a.Eventually("the old leader's leadership ended", func() bool {
		return logs.Record("msg", "leadership ended") != nil
	})
	if r := logs.Record("msg", "leadership ended"); r["cause"] != "handing over the lease on request" {
		t.Fatalf("leadership ended with %v, want the handover", r)
	}
	for _, r := range logs.Records() {
		if r["level"] == "ERROR" {
			t.Errorf("a requested handover logged an ERROR: %v", r)
		}
	}
}

// A standby told to stop said nothing in its log: the last line was
// "broker node serving", so an operator following the README's failover
// (a standby stopped and restarted by hand) could not tell a clean stop
// from a node killed or hung. It now ends its log with "broker node
// stopped" and the cause, as a leader's "leadership ended" does.
func TestStoppedStandbyLogsThatItStopped(t *testing.T) {
	a := nodetest.Start(t, nil)
	logs := &syncbuf.Buffer{}
	b := a.PeerWith("node-b", nil, func(o *node.Options) { o.Logger = slog.New(slog.NewJSONHandler(logs, nil)) })
	b.Eventually("the standby serves", func() bool { return logs.Record("msg", "broker node serving") != nil })
	b.Shutdown() // returns once the node's Run has returned
	if logs.Record("msg", "broker node stopped") == nil {
		t.Fatalf("a stopped standby logged no stop; logs:\n%s", logs.String())
	}
}
