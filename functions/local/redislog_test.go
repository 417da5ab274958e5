package main

import (
	"bytes"
	"encoding/json"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/store/storetest"
)

// lockedBuffer is stderr written by the doors' goroutines and read by the test.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Doors whose Redis does not answer say so in their JSON log, and only
// there: go-redis's own messages (a pool that cannot dial) printed plain
// text lines ("redis: 2026/12/07 … pool.go:770: …") straight to the
// process's stderr, between the doors' JSON lines (design.md §Logs).
func TestDoorsLogTheRedisClientAsJSON(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String() // nothing listens here once closed
	ln.Close()
	environ := []string{
		"FUNDUQ_DATABASE_URL=" + storetest.URL(t), "FUNDUQ_REDIS_URL=redis://" + closed + "/0",
		"FUNDUQ_IDENTITY_KEY=" + nodetest.SeedHex(0xb8), "FUNDUQ_TOKEN_SECRET=" + nodetest.TokenSecret,
		"FUNDUQ_DOORS_ADDR=127.0.0.1:0",
	}
	var errb lockedBuffer
	base, stop := serveDoors(t, environ, &errb)
	// /health answers once its Redis probe has failed: go-redis has given
	// up dialing, and said so, by then.
	if c, b := call(t, "GET", base+"/health", ""); c != 503 || !strings.Contains(b, `"redis":"unreachable"`) {
		t.Fatalf("health %d %s; want 503 naming redis", c, b)
	}
	stop()
	dial := false
	for _, line := range strings.Split(strings.TrimSpace(errb.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("a log line that is not JSON: %q", line)
			continue
		}
		if d, _ := rec["detail"].(string); rec["msg"] == "redis client" && strings.Contains(d, "failed to dial") {
			dial = true
		}
	}
	if !dial {
		t.Errorf("go-redis's dial failure is not in the doors' JSON log (it went to the process's stderr as plain text):\n%s", errb.String())
	}
}
