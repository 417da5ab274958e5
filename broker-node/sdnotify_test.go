package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
)

// `broker-node` under systemd (NOTIFY_SOCKET set, as for the Type=notify
// unit in infra/) says READY=1 once it serves, and STOPPING=1 when SIGTERM
// stops it, then exits 0 (design.md §A stuck lease loop).
func TestServeNotifiesSystemd(t *testing.T) {
	dir, err := os.MkdirTemp("", "sd") // short: a socket path is at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "notify")
	sock, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	t.Setenv("NOTIFY_SOCKET", path)
	next := func(what string) string {
		t.Helper()
		if err := sock.SetReadDeadline(time.Now().Add(nodetestGuard)); err != nil { // a hang guard
			t.Fatal(err)
		}
		buf := make([]byte, 4096)
		k, err := sock.Read(buf)
		if err != nil {
			t.Fatalf("no notification %s: %v", what, err)
		}
		return string(buf[:k])
	}

	env := emptyLeaseEnv(t)
	env["FUNDUQ_IDENTITY_KEY"] = nodetest.SeedHex(0xb6)
	env["FUNDUQ_TOKEN_SECRET"] = nodetest.TokenSecret
	env["FUNDUQ_HTTP_ADDR"] = "127.0.0.1:0"
	env["FUNDUQ_ADVERTISE_URL"] = "http://127.0.0.1:1"
	var out, errb bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- run(nil, env, &out, &errb) }()
	if got := next("once it serves"); got != "READY=1" {
		t.Fatalf("first notification %q; want READY=1", got)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if got := next("after SIGTERM"); got != "STOPPING=1" {
		t.Fatalf("after SIGTERM: %q; want STOPPING=1", got)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d after SIGTERM; want 0: %s", code, strings.TrimSpace(errb.String()))
		}
	case <-time.After(nodetestGuard):
		t.Fatal("still serving after SIGTERM")
	}
}
