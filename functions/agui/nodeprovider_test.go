package agui_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/internal/nodejs"
	"github.com/funduq/funduq-go/internal/syncbuf"
)

// nodeLine is what e2e/provider.mjs prints for each run it served: the
// run, the caller's last text as it read it, and the thread's messages as
// its thread_messages query returned them.
type nodeLine struct {
	RunID    string
	ThreadID string
	Text     string
	Thread   []map[string]any // the thread_messages query with limit 10
	Last     []map[string]any // and with limit 1
	Refused  bool             // the refusing agent's line
}

// TestNodeProviderFromTheWireDescription: an agent provider written in
// JavaScript from the wire v4 description alone (e2e/provider.mjs), not
// from our code, serves a two-turn conversation through the AG-UI door. It
// behaves as the wire allows and our SDK does not — no declared capacity,
// pretty-printed frames in its own key order, an ack without "accepted",
// events without seq, the ack, a thread query, the events and the finish
// written in one burst — and checks funduq's side as strictly: the welcome's
// signature, registered as the one answer to register, a run frame of
// exactly its five keys. The caller sees every event once, in order, text
// and an unknown event type as sent; the provider's query sees the
// conversation, its limit keeping the newest; a refusal with a reason
// fails the run with that reason, verbatim; nothing is counted against the
// key.
func TestNodeProviderFromTheWireDescription(t *testing.T) {
	node := nodejs.Require(t, "node")
	h := nodetest.Start(t, nil)
	key := signer(t, 0xd7).PublicKeyHex()
	const agent = "node-echo"

	ctx, cancel := context.WithCancel(context.Background())
	// Node 22 has WebSocket; Node 20 behind a flag.
	args := []string{"provider.mjs"}
	if exec.Command(node, "-e", "process.exit(typeof WebSocket === 'function' ? 0 : 1)").Run() != nil {
		args = append([]string{"--experimental-websocket", "--no-warnings"}, args...)
	}
	cmd := exec.CommandContext(ctx, node, args...)
	cmd.Dir = "e2e"
	cmd.Env = append(os.Environ(), "FUNDUQ_BROKER="+h.URL, "FUNDUQ_SEED="+nodetest.SeedHex(0xd7), "FUNDUQ_AGENT="+agent)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	var stderr syncbuf.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan nodeLine)
	exited := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var l nodeLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				t.Errorf("provider.mjs printed %q: %v", sc.Text(), err)
				continue
			}
			lines <- l
		}
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cancel()
		<-exited
		if t.Failed() {
			t.Logf("provider.mjs stderr:\n%s", stderr.String())
		}
	})
	// served waits for the provider's line for runID. Its queries were
	// written in the burst before the run's events and finish, and an
	// answer waits only for the events sent before its query (docs/design.md
	// §Provider link): it may already hold this run's own reply. That reply
	// is taken out of Thread, and Last is the newest message before it.
	served := func(runID string) nodeLine {
		t.Helper()
		select {
		case l := <-lines:
			if l.RunID != runID {
				t.Fatalf("provider.mjs served %s, want %s", l.RunID, runID)
			}
			own := func(m map[string]any) bool { return m["id"] == runID+"-reply" }
			if n := len(l.Thread); n > 0 && own(l.Thread[n-1]) {
				l.Thread = l.Thread[:n-1]
			}
			if len(l.Last) == 1 && own(l.Last[0]) && len(l.Thread) > 0 {
				l.Last = l.Thread[len(l.Thread)-1:]
			}
			return l
		case err := <-exited:
			t.Fatalf("provider.mjs exited: %v\n%s", err, stderr.String())
		case <-time.After(guard):
			t.Fatalf("provider.mjs did not serve %s\n%s", runID, stderr.String())
		}
		return nodeLine{}
	}
	h.Eventually(agent+" is served", func() bool {
		as, err := h.Store.ListAgents(context.Background())
		for _, a := range as {
			if err == nil && a.Name == agent && a.ProviderKey == key {
				return a.Online
			}
		}
		return false
	})
	srv := startDoor(t, h, nil)

	turn := func(threadID, runID, text string) (thread string, fs []frame) {
		t.Helper()
		body := fmt.Sprintf(`{"threadId":%q,"runId":%q,"state":{},"messages":[{"id":%q,"role":"user","content":%q}],"tools":[],"context":[],"forwardedProps":{}}`,
			threadID, runID, runID+"-m", text)
		fs = events(openStream(t, "POST", aguiURL(srv, key, agent), body, nil).rest())
		if len(fs) == 0 {
			t.Fatalf("turn %q: no events", text)
		}
		return fmt.Sprint(fs[0].event(t)["threadId"]), fs
	}
	check := func(fs []frame, text string) (runID string) {
		t.Helper()
		want := []string{"RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END", "x-node-note", "RUN_FINISHED"}
		if got := typesOf(t, fs); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("event types %v, want %v", got, want)
		}
		for i, f := range fs {
			if f.ID != fmt.Sprint(i+1) {
				t.Errorf("event %d has id %q", i+1, f.ID)
			}
		}
		if d := fs[2].event(t)["delta"]; d != "node heard «"+text+"» ✓ 你好" {
			t.Errorf("the text reached the caller as %q", d)
		}
		if n := fs[4].event(t)["note"]; n != "an event type funduq does not know" {
			t.Errorf("the unknown event reached the caller as %s", fs[4].Data)
		}
		return fmt.Sprint(fs[0].event(t)["runId"])
	}

	thread, fs := turn("new", "node-r1", "hi")
	first := check(fs, "hi")
	l := served(first)
	if l.Text != "hi" || l.ThreadID != thread || len(l.Thread) == 0 || l.Thread[len(l.Thread)-1]["content"] != "hi" {
		t.Fatalf("the provider's view of turn 1: %+v", l)
	}

	again, fs := turn(thread, "node-r2", "again")
	if again != thread {
		t.Fatalf("turn 2 went to thread %s, want %s", again, thread)
	}
	second := check(fs, "again")
	l = served(second)
	var said []string
	for _, m := range l.Thread {
		said = append(said, fmt.Sprint(m["role"], ": ", m["content"]))
	}
	want := []string{"user: hi", "assistant: node heard «hi» ✓ 你好", "user: again"}
	if strings.Join(said, "|") != strings.Join(want, "|") {
		t.Fatalf("the provider's query of turn 2 saw %q, want %q", said, want)
	}
	if len(l.Last) != 1 || l.Last[0]["content"] != "again" {
		t.Fatalf("the provider's query with limit 1 saw %v, want the newest message alone", l.Last)
	}

	// The refusing agent: the caller's stream ends on the run's error and
	// the record keeps the provider's reason as it was sent.
	resp, stop := do(t, "POST", aguiURL(srv, key, agent+"-refuser"), input("new", "node-r3", ""), nil)
	fsr := events((&stream{t: t, resp: resp, br: bufio.NewReader(resp.Body), cancel: stop}).rest())
	resp.Body.Close()
	stop()
	if types := typesOf(t, fsr); len(types) == 0 || types[len(types)-1] != "RUN_ERROR" {
		t.Fatalf("the refused run's stream: %v", types)
	}
	refused := fmt.Sprint(fsr[0].event(t)["runId"])
	if l := served(refused); !l.Refused {
		t.Fatalf("provider.mjs did not refuse %s: %+v", refused, l)
	}
	if r := h.WaitStatus(refused, run.Failed); r.FailureReason != "node refuses: not today" {
		t.Fatalf("the refused run failed %q, want the provider's reason verbatim", r.FailureReason)
	}

	for _, id := range []string{first, second} {
		h.WaitStatus(id, run.Completed)
	}
	if q := h.Quality(key); q != (store.Quality{ProviderKey: key}) {
		t.Fatalf("counted against the provider: %+v", q)
	}
}
