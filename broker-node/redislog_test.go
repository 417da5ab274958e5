package main

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
)

// waitWriter is stderr that closes seen once a line holding want arrives.
type waitWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	once sync.Once
	seen chan struct{}
}

func (w *waitWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return n, err
}

func (w *waitWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// closedAddr is a local address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// A node whose Redis does not answer says so in its JSON log, and only
// there: go-redis's own messages (a pool that cannot dial) printed plain
// text lines ("redis: 2026/12/07 … pool.go:770: …") straight to the
// process's stderr, between the node's JSON lines, which a log reader
// parsing JSON drops or chokes on (design.md §Logs).
func TestServeLogsTheRedisClientAsJSON(t *testing.T) {
	env := emptyLeaseEnv(t)
	env["FUNDUQ_REDIS_URL"] = "redis://" + closedAddr(t) + "/0"
	env["FUNDUQ_IDENTITY_KEY"] = nodetest.SeedHex(0xb7)
	env["FUNDUQ_TOKEN_SECRET"] = nodetest.TokenSecret
	env["FUNDUQ_HTTP_ADDR"] = "127.0.0.1:0"
	env["FUNDUQ_ADVERTISE_URL"] = "http://127.0.0.1:1"
	// The campaign's error comes back only after go-redis has given up
	// dialing, and said so.
	errw := &waitWriter{want: `"lease campaign failed"`, seen: make(chan struct{})}
	var out bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- run(nil, env, &out, errw) }()
	select {
	case <-errw.seen:
	case code := <-done:
		t.Fatalf("the node exited %d before campaigning: %s", code, errw.String())
	case <-time.After(nodetestGuard):
		t.Fatalf("no failed campaign logged: %s", errw.String())
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(nodetestGuard):
		t.Fatal("the node did not stop on SIGTERM")
	}
	dial := false
	for _, line := range strings.Split(strings.TrimSpace(errw.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("a log line that is not JSON: %q", line)
			continue
		}
		if rec["msg"] == "redis client" && strings.Contains(rec["detail"].(string), "failed to dial") {
			dial = true
			if rec["level"] != "WARN" {
				t.Errorf("go-redis's dial failure at %v; want WARN: %q", rec["level"], line)
			}
		}
	}
	if !dial {
		t.Errorf("go-redis's dial failure is not in the node's JSON log (it went to the process's stderr as plain text):\n%s", errw.String())
	}
}
