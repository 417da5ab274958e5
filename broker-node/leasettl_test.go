package main

import (
	"bytes"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
)

// A FUNDUQ_LEASE_TTL too short to hold a lease stops the node at start,
// naming the setting. 1ns (or any TTL under Redis's 1 ms) was taken: the
// node served, never led, and campaigned in a hot loop, every campaign
// refused by Redis ("ERR invalid expire time in 'set' command"), 15,000 WARN
// lines in 3 s; a few milliseconds led, renewing without pause.
func TestServeRefusesALeaseTTLTooShort(t *testing.T) {
	for _, ttl := range []string{"1ns", "2ms", "999ms"} {
		env := emptyLeaseEnv(t)
		env["FUNDUQ_IDENTITY_KEY"] = nodetest.SeedHex(0xb9)
		env["FUNDUQ_TOKEN_SECRET"] = nodetest.TokenSecret
		env["FUNDUQ_HTTP_ADDR"] = "127.0.0.1:0"
		env["FUNDUQ_ADVERTISE_URL"] = "http://127.0.0.1:1"
		env["FUNDUQ_LEASE_TTL"] = ttl
		var out bytes.Buffer
		errw := &waitWriter{want: `"broker node serving"`, seen: make(chan struct{})}
		done := make(chan int, 1)
		go func() { done <- run(nil, env, &out, errw) }()
		select {
		case code := <-done:
			if code != 2 || !strings.Contains(errw.String(), "FUNDUQ_LEASE_TTL") || !strings.Contains(errw.String(), "at least 1s") {
				t.Errorf("FUNDUQ_LEASE_TTL=%s: exit %d, stderr %q; want exit 2 naming FUNDUQ_LEASE_TTL and its floor", ttl, code, errw.String())
			}
		case <-errw.seen:
			if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			<-done
			t.Errorf("FUNDUQ_LEASE_TTL=%s: the node started serving; want it refused at start:\n%.600s", ttl, errw.String())
		case <-time.After(nodetestGuard):
			t.Fatalf("FUNDUQ_LEASE_TTL=%s: neither refused nor served", ttl)
		}
	}
}
