package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/internal/leaktest"
)

func TestMain(m *testing.M) {
	leaktest.MainWithPools(m)
}

func call(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The local server mounts the doors on one port from the environment, and
// stops cleanly when its context ends.
func TestLocalDoors(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	p.Close()
	h.Eventually("echo unserved", func() bool {
		as, err := h.Store.ListAgents(context.Background())
		return err == nil && len(as) == 1 && !as[0].Online
	})
	environ := []string{
		"FUNDUQ_DATABASE_URL=" + h.Cfg.DatabaseURL, "FUNDUQ_REDIS_URL=" + h.Cfg.RedisURL,
		"FUNDUQ_IDENTITY_KEY=" + h.Cfg.IdentityKey, "FUNDUQ_TOKEN_SECRET=" + h.Cfg.TokenSecret,
		"FUNDUQ_DOORS_ADDR=127.0.0.1:0", "FUNDUQ_LOG_LEVEL=error",
	}
	redisPrefix = h.Prefix
	t.Cleanup(func() { redisPrefix = "" })
	base, _ := serveDoors(t, environ, io.Discard)

	if c, b := call(t, "GET", base+"/health", ""); c != 200 || !strings.Contains(b, `"status":"ok"`) {
		t.Fatalf("health %d %s", c, b)
	}
	c, b := call(t, "GET", base+"/agents", "")
	var agents struct {
		Agents []struct {
			Name   string `json:"name"`
			Online bool   `json:"online"`
		} `json:"agents"`
	}
	if json.Unmarshal([]byte(b), &agents) != nil || c != 200 || len(agents.Agents) != 1 || agents.Agents[0].Online {
		t.Fatalf("agents %d %s", c, b)
	}
	c, b = call(t, "POST", base+"/agui/"+p.Key+"/echo", `{"threadId":"t","runId":"r","messages":[{"role":"user","content":"hi"}]}`)
	if c != 200 || strings.Count(b, "data: ") != 2 || !strings.Contains(b, `"RUN_ERROR"`) {
		t.Fatalf("offline run %d %s", c, b)
	}
	if c, b := call(t, "GET", base+"/metrics", ""); c != 200 || !strings.Contains(b, "go_goroutines") ||
		!strings.Contains(b, "process_resident_memory_bytes") {
		t.Fatalf("metrics %d %.200s", c, b)
	}
	if c, b := call(t, "GET", base+"/nowhere", ""); c != 404 || !strings.Contains(b, `"code":"not_found"`) {
		t.Fatalf("unknown route %d %s", c, b)
	}
}

// A bad configuration exits 2 naming the variable.
func TestLocalDoorsBadConfig(t *testing.T) {
	var out strings.Builder
	if code := run(context.Background(), []string{"FUNDUQ_REDIS_URL=redis://x"}, &out, nil); code != 2 ||
		!strings.Contains(out.String(), "FUNDUQ_DATABASE_URL") {
		t.Fatalf("code %d: %s", code, out.String())
	}
}

// -h and --help print the usage and the settings on stdout and exit 0,
// reading no setting; any other argument is refused (exit 2) before
// anything starts. `go run ./functions/local --help` used to answer only
// "configuration: FUNDUQ_DATABASE_URL: required and not set; …".
func TestLocalDoorsCommandLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		out  string
		err  string
	}{
		{[]string{"--help"}, 0, "FUNDUQ_DOORS_ADDR", ""},
		{[]string{"-h"}, 0, "usage: ", ""},
		{[]string{"serve"}, 2, "", `unexpected argument "serve"`},
	} {
		var out, errb strings.Builder
		code, done := commandLine(tc.args, &out, &errb)
		if !done || code != tc.code || !strings.Contains(out.String(), tc.out) || !strings.Contains(errb.String(), tc.err) {
			t.Errorf("%v: done %v exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q",
				tc.args, done, code, out.String(), errb.String(), tc.code, tc.out, tc.err)
		}
	}
	if _, done := commandLine(nil, io.Discard, io.Discard); done {
		t.Error("no argument: want the doors to serve")
	}
}
