package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
)

// A misspelt setting is named as the node starts, with the setting it
// resembles: FUNDUQ_LEASE_TLL=3s and FUNDUQ_RETENTON=720h were ignored
// without a word, the node running on the defaults (a 10 s lease, no
// retention) while its operator believed otherwise. Another program's
// variable, or a doors' setting in a shared environment, is not named.
func TestServeNamesAMisspeltSetting(t *testing.T) {
	env := emptyLeaseEnv(t)
	env["FUNDUQ_IDENTITY_KEY"] = nodetest.SeedHex(0xba)
	env["FUNDUQ_TOKEN_SECRET"] = nodetest.TokenSecret
	env["FUNDUQ_HTTP_ADDR"] = "127.0.0.1:0"
	env["FUNDUQ_ADVERTISE_URL"] = "http://127.0.0.1:1"
	env["FUNDUQ_LEASE_TLL"] = "3s"
	env["FUNDUQ_RETENTON"] = "720h"
	env["FUNDUQ_DOORS_ADDR"] = "127.0.0.1:8701"        // the doors', in a shared environment
	env["FUNDUQ_BROKER_URL"] = "http://127.0.0.1:8700" // an agent's
	var out bytes.Buffer
	errw := &waitWriter{want: `"broker node serving"`, seen: make(chan struct{})}
	done := make(chan int, 1)
	go func() { done <- run(nil, env, &out, errw) }()
	select {
	case <-errw.seen:
	case code := <-done:
		t.Fatalf("the node exited %d: %s", code, errw.String())
	case <-time.After(nodetestGuard):
		t.Fatalf("the node did not serve: %s", errw.String())
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-done
	named := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(errw.String()), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil || rec["msg"] != "unknown setting ignored; check its spelling" {
			continue
		}
		if rec["level"] != "WARN" {
			t.Errorf("%q at %v; want WARN", line, rec["level"])
		}
		v, _ := rec["variable"].(string)
		named[v], _ = rec["did_you_mean"].(string)
	}
	want := map[string]string{"FUNDUQ_LEASE_TLL": "FUNDUQ_LEASE_TTL", "FUNDUQ_RETENTON": "FUNDUQ_RETENTION"}
	if len(named) != len(want) || named["FUNDUQ_LEASE_TLL"] != want["FUNDUQ_LEASE_TLL"] || named["FUNDUQ_RETENTON"] != want["FUNDUQ_RETENTON"] {
		t.Errorf("misspelt settings named %v; want %v:\n%s", named, want, errw.String())
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{{"FUNDUQ_LEASE_TLL", "FUNDUQ_LEASE_TTL", 1}, {"FUNDUQ_LEASE_TLT", "FUNDUQ_LEASE_TTL", 1}, {"FUNDUQ_RETENTON", "FUNDUQ_RETENTION", 1},
		{"ab", "ab", 0}, {"", "abc", 3}, {"FUNDUQ_BROKER_URL", "FUNDUQ_REDIS_URL", 5}} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d; want %d", tc.a, tc.b, got, tc.want)
		}
	}
}
