package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/wire"
	"github.com/funduq/funduq-go/internal/leaktest"
	"github.com/funduq/funduq-go/provider"
)

func TestMain(m *testing.M) { leaktest.Main(m) }

// guard bounds waits; it is never an assertion about timing.
const guard = 10 * time.Second

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestSettingsFromEnv(t *testing.T) {
	s, err := settingsFromEnv(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if s.BrokerURL != "http://127.0.0.1:8700" || s.KeyFile != "./echo-agent.key" || s.AgentName != "echo" ||
		s.FunduqKey != "" || s.MaxConcurrentRuns != nil {
		t.Fatalf("defaults %+v", s)
	}
	pin := strings.Repeat("ab", 32)
	s, err = settingsFromEnv(env(map[string]string{
		"FUNDUQ_BROKER_URL": "https://funduq.example", "FUNDUQ_AGENT_KEY_FILE": "/k",
		"FUNDUQ_PUBLIC_KEY": pin, "FUNDUQ_AGENT_NAME": "parrot", "FUNDUQ_MAX_CONCURRENT_RUNS": "4",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if s.BrokerURL != "https://funduq.example" || s.KeyFile != "/k" || s.FunduqKey != pin || s.AgentName != "parrot" ||
		s.MaxConcurrentRuns == nil || *s.MaxConcurrentRuns != 4 {
		t.Fatalf("settings %+v", s)
	}
	for k, v := range map[string]string{
		"FUNDUQ_MAX_CONCURRENT_RUNS": "0",
		"FUNDUQ_PUBLIC_KEY":          "nope",
	} {
		if _, err := settingsFromEnv(env(map[string]string{k: v})); err == nil {
			t.Errorf("%s=%q accepted", k, v)
		}
	}
	if _, err := settingsFromEnv(env(map[string]string{"FUNDUQ_MAX_CONCURRENT_RUNS": "many"})); err == nil {
		t.Error("non-numeric capacity accepted")
	}
}

func TestKeyFileIsCreatedOnceWithMode0600(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.key")
	first, created, err := loadOrCreateKey(path)
	if err != nil || !created {
		t.Fatalf("create: %v, created=%v", err, created)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v", info.Mode().Perm())
	}
	b, _ := os.ReadFile(path)
	if len(strings.TrimSpace(string(b))) != 64 {
		t.Fatalf("key file holds %q", b)
	}
	again, created, err := loadOrCreateKey(path)
	if err != nil || created {
		t.Fatalf("reload: %v, created=%v", err, created)
	}
	if again.PublicKeyHex() != first.PublicKeyHex() {
		t.Fatal("reloading the key file gave another key")
	}
	bad := filepath.Join(t.TempDir(), "bad.key")
	if err := os.WriteFile(bad, []byte("not hex"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := loadOrCreateKey(bad); err == nil {
		t.Fatal("a bad key file was accepted")
	}
}

func TestReply(t *testing.T) {
	r := &provider.Run{Input: json.RawMessage(`{"messages":[{"id":"1","role":"user","content":"hello"},{"id":"2","role":"assistant","content":"x"}]}`)}
	if got := reply(r); got != "echo: hello" {
		t.Fatalf("reply = %q", got)
	}
}

// TestEchoEndToEnd runs the program against a minimal scripted funduq: it
// registers, answers one run with RUN_STARTED, the echoed text message and
// RUN_FINISHED, and stops when its context ends.
func TestEchoEndToEnd(t *testing.T) {
	funduq, err := identity.NewSignerFromSeedHex(strings.Repeat("5a", 32))
	if err != nil {
		t.Fatal(err)
	}
	frames := make(chan string, 100)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []*websocket.Conn
	mux := http.NewServeMux()
	mux.HandleFunc("POST /tickets", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(wire.TicketResponse{Ticket: "t1cket", FunduqPublicKey: funduq.PublicKeyHex()})
	})
	upgrader := websocket.Upgrader{}
	mux.HandleFunc("GET /ws/provider", func(w http.ResponseWriter, r *http.Request) {
		conn, err := upgrader.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		mu.Lock()
		conns = append(conns, conn)
		wg.Add(1)
		mu.Unlock()
		defer wg.Done()
		defer conn.Close()
		var hello wire.Hello
		if conn.ReadJSON(&hello) != nil {
			return
		}
		pub, _ := identity.ParsePublicKey(hello.PublicKey)
		if identity.Verify(pub, identity.ProviderConnectPayload(funduq.PublicKeyHex(), hello.Ticket, hello.Nonce), hello.Proof) != nil {
			frames <- "bad proof"
			return
		}
		_ = conn.WriteJSON(wire.Welcome{Type: "welcome", FunduqPublicKey: funduq.PublicKeyHex(),
			Answer: funduq.Sign(identity.FunduqConnectPayload(hello.Ticket, hello.Nonce))})
		var reg wire.Register
		if conn.ReadJSON(&reg) != nil || len(reg.Agents) != 1 {
			return
		}
		_ = conn.WriteJSON(wire.Registered{Type: "registered", Names: []string{reg.Agents[0].Name}})
		thread := "t-1"
		_ = conn.WriteJSON(wire.NewRunFrame(wire.DeliveredRun{RunID: "r-1", AgentName: reg.Agents[0].Name, ThreadID: &thread,
			RunInput: json.RawMessage(`{"threadId":"t-1","runId":"c-1","parentRunId":null,"state":null,` +
				`"messages":[{"id":"m1","role":"user","content":"is anyone there?","name":null,"encryptedValue":null}],` +
				`"tools":[],"context":[],"forwardedProps":null,"resume":null}`)}))
		for {
			_, raw, err := conn.ReadMessage()
			if err != nil {
				return
			}
			frames <- string(raw)
		}
	})
	srv := httptest.NewServer(mux)
	defer func() {
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
		srv.Close()
	}()

	keyFile := filepath.Join(t.TempDir(), "echo.key")
	ctx, cancel := context.WithCancel(t.Context())
	var stdout, stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, env(map[string]string{
			"FUNDUQ_BROKER_URL":     srv.URL,
			"FUNDUQ_AGENT_KEY_FILE": keyFile,
			"FUNDUQ_PUBLIC_KEY":     funduq.PublicKeyHex(),
			"FUNDUQ_AGENT_NAME":     "parrot",
		}), &stdout, &stderr)
	}()

	want := []string{
		`{"type":"ack","runId":"r-1","accepted":true}`,
		`{"type":"event","runId":"r-1","seq":1,"event":{"runId":"r-1","threadId":"t-1","type":"RUN_STARTED"}}`,
		`{"type":"event","runId":"r-1","seq":2,"event":{"messageId":"r-1-reply","role":"assistant","type":"TEXT_MESSAGE_START"}}`,
		`{"type":"event","runId":"r-1","seq":3,"event":{"delta":"echo: is anyone there?","messageId":"r-1-reply","type":"TEXT_MESSAGE_CONTENT"}}`,
		`{"type":"event","runId":"r-1","seq":4,"event":{"messageId":"r-1-reply","type":"TEXT_MESSAGE_END"}}`,
		`{"type":"event","runId":"r-1","seq":5,"event":{"runId":"r-1","threadId":"t-1","type":"RUN_FINISHED"}}`,
		`{"type":"finish","runId":"r-1"}`,
	}
	for _, w := range want {
		select {
		case got := <-frames:
			if got != w {
				t.Fatalf("frame\n got %s\nwant %s", got, w)
			}
		case <-time.After(guard):
			t.Fatalf("no frame; want %s", w)
		}
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit code %d; logs:\n%s", code, stderr.String())
		}
	case <-time.After(guard):
		t.Fatal("echo-agent did not stop")
	}
	signer, created, err := loadOrCreateKey(keyFile)
	if err != nil || created {
		t.Fatalf("key file: %v, created=%v", err, created)
	}
	out := stdout.String()
	if !strings.Contains(out, signer.PublicKeyHex()) || !strings.Contains(out, identity.Fingerprint(signer.PublicKey())) {
		t.Fatalf("stdout %q does not show the key and fingerprint", out)
	}
	for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		if !json.Valid([]byte(line)) {
			t.Fatalf("log line is not JSON: %s", line)
		}
	}
}

// -h and --help print the settings on stdout and exit 0 without creating a
// key or dialling anything; any other argument is refused (exit 2).
// `go run ./examples/echo-agent --help` used to create ./echo-agent.key
// and serve the agent.
func TestEchoAgentCommandLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		out  string
		err  string
	}{
		{[]string{"--help"}, 0, "FUNDUQ_AGENT_KEY_FILE", ""},
		{[]string{"-h"}, 0, "FUNDUQ_BROKER_URL", ""},
		{[]string{"http://127.0.0.1:8700"}, 2, "", `unexpected argument "http://127.0.0.1:8700"`},
	} {
		var out, errb bytes.Buffer
		code, done := commandLine(tc.args, &out, &errb)
		if !done || code != tc.code || !strings.Contains(out.String(), tc.out) || !strings.Contains(errb.String(), tc.err) {
			t.Errorf("%v: done %v exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q",
				tc.args, done, code, out.String(), errb.String(), tc.code, tc.out, tc.err)
		}
	}
	if _, done := commandLine(nil, &bytes.Buffer{}, &bytes.Buffer{}); done {
		t.Error("no argument: want the agent to serve")
	}
}
