package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/node"
	"github.com/funduq/funduq-go/core/redistest"
	"github.com/funduq/funduq-go/core/store"
)

// `lease status` says when the node that leads has stopped writing its
// PostgreSQL heartbeat: a leader cut off from PostgreSQL but renewing its
// lease in Redis leads in name only (a run waits queued, a healthy standby
// waits), and the status read "leader: nodeA, epoch 10, lease 9.9s left"
// as for a healthy one.
func TestLeaseStatusNamesALapsedHeartbeat(t *testing.T) {
	env := emptyLeaseEnv(t)
	ctx := context.Background()
	st, err := store.Open(ctx, env["FUNDUQ_DATABASE_URL"], store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	took, err := st.AdvanceEpoch(ctx, "ghost", "http://ghost.invalid")
	if err != nil {
		t.Fatal(err)
	}
	// The heartbeat of this epoch, lapsed a minute ago.
	if _, err := st.Pool().Exec(ctx, `UPDATE broker_heartbeat SET epoch = $1, alive_until = now() - interval '1 minute' WHERE id = 1`, took); err != nil {
		t.Fatal(err)
	}
	rdb, _ := redistest.Client(t)
	if err := rdb.Set(ctx, node.LeaseKey(env["FUNDUQ_REDIS_PREFIX"]), "ghost 1", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	status := func(args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if code := run(append([]string{"lease", "status"}, args...), env, &out, &errb); code != 0 {
			t.Fatalf("lease status %v: exit %d: %s", args, code, errb.String())
		}
		return out.String()
	}
	if out := status(); !strings.Contains(out, "heartbeat: lapsed 1m") || !strings.Contains(out, "lease handover") {
		t.Errorf("lease status with the heartbeat lapsed a minute ago:\n%s\nwant a heartbeat line naming the lapse and the handover", out)
	}
	var js leaseStatus
	if err := json.Unmarshal([]byte(status("--json")), &js); err != nil || js.HeartbeatStaleMS < 60000 {
		t.Errorf("lease status --json: %+v (%v); want heartbeatStaleMs of a minute or more", js, err)
	}
	// Written again, it is current: no such line.
	if err := st.Heartbeat(ctx, took, time.Hour); err != nil {
		t.Fatal(err)
	}
	if out := status(); strings.Contains(out, "heartbeat") {
		t.Errorf("lease status with a current heartbeat:\n%s\nwant no heartbeat line", out)
	}
}
