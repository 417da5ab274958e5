package main

// The failover chaos test around a pause: each run's first round ends
// paused on an interrupt (q1), its caller answers through an AG-UI door,
// and the leader goes away at a seeded moment around one run's pause —
// while its first round streams, between its paused finish and the answer
// (the answer landing while the leader is away or after the takeover), just
// after the answer was taken, or while the answer's round streams — the
// other runs landing wherever their seeded timing puts them. What a caller
// would notice is checked: each run completes, the handler saw the answer
// once, each round's events reach the caller once and in order (across a
// resume at the other door), the record holds each round once, and nothing
// waited for a grace. Same harness, seeds and flags as TestFailoverChaos:
//
//	FUNDUQ_FAILOVER_SEEDS=1-40 go test -race -count=1 -run TestFailoverChaosAroundAnInterrupt ./broker-node/

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/identity"
	runstatus "github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/provider"
)

func TestFailoverChaosAroundAnInterrupt(t *testing.T) {
	forFailoverSeeds(t, "TestFailoverChaosAroundAnInterrupt", failoverChaosAroundAnInterrupt)
}

// pauseCaller is one caller whose run pauses and who answers it.
type pauseCaller struct {
	n          int
	at         time.Duration // when it starts its run
	think      time.Duration // between the paused finish and its answer
	agent      string
	door       int    // where it starts the run
	answerDoor int    // where it answers
	dropAt     int    // leave the first round's stream after this many events, resume at the other door (0: never)
	dropAt2    int    // the same for the answer's stream
	thread     string // funduq's, once the first round started
	id         string
	err        error
	first      []sseEv // the first round as the caller saw it
	second     []sseEv // the answer's round
	resumed    [2]bool
}

// askRound is the SDK handler's events for a run's round: the first ends
// paused on interrupt q1, the answer's finishes.
func askRound(thread, id string, n int, answered bool) []string {
	msg, finish := "s1", fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[{"id":"q1","reason":"confirm"}]}}`, thread, id)
	if answered {
		msg, finish = "s2", fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, thread, id)
	}
	evs := []string{fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id),
		fmt.Sprintf(`{"type":"TEXT_MESSAGE_START","messageId":%q,"role":"assistant"}`, msg)}
	for i := range n {
		evs = append(evs, fmt.Sprintf(`{"type":"TEXT_MESSAGE_CONTENT","messageId":%q,"delta":"sdk-%d "}`, msg, i))
	}
	return append(evs, fmt.Sprintf(`{"type":"TEXT_MESSAGE_END","messageId":%q}`, msg), finish)
}

// hasAnswer reports whether a run's input carries an AG-UI resume.
func hasAnswer(input json.RawMessage) bool {
	var in struct {
		Resume json.RawMessage `json:"resume"`
	}
	_ = json.Unmarshal(input, &in)
	return len(in.Resume) > 0 && string(in.Resume) != "null"
}

func failoverChaosAroundAnInterrupt(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x1a7e))
	a, b, lb, doors, env := chaosPair(t, nil)

	sdkSigner, _ := identity.NewSignerFromSeedHex(nodetest.SeedHex(byte(0x20 + seed%100)))
	rawSigner, _ := identity.NewSignerFromSeedHex(nodetest.SeedHex(byte(0xa0 + seed%100)))
	var sdkCap *int
	if c := rng.IntN(4); c > 0 {
		sdkCap = nodetest.Limit(c)
	}
	sdkEvents := 1 + rng.IntN(5)
	sdkGap := time.Duration(rng.IntN(80)) * time.Millisecond
	var sdkMu sync.Mutex
	sdkCalls := map[string][]bool{} // run id → one entry per handler call: had the answer
	client, err := provider.New(provider.Config{
		BaseURL: lb, Signer: sdkSigner, FunduqKey: a.h.Node.FunduqKey(), MaxConcurrentRuns: sdkCap,
		Backoff:      provider.Backoff{Min: 20 * time.Millisecond, Max: 200 * time.Millisecond},
		PingInterval: 200 * time.Millisecond,
		Logger:       chaosLogger(t),
		Agents: []provider.Agent{{Name: "sdk", Handler: func(ctx context.Context, r *provider.Run) error {
			answered := hasAnswer(r.Input)
			sdkMu.Lock()
			sdkCalls[r.ID] = append(sdkCalls[r.ID], answered)
			sdkMu.Unlock()
			for _, ev := range askRound(r.ThreadID, r.ID, sdkEvents, answered) {
				if err := r.Emit(ctx, json.RawMessage(ev)); err != nil {
					return err
				}
				time.Sleep(sdkGap)
			}
			return nil
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	sdkCtx, sdkStop := context.WithCancel(context.Background())
	sdkExit := make(chan struct{})
	go func() { defer close(sdkExit); _ = client.Run(sdkCtx) }()
	defer func() { sdkStop(); <-sdkExit }()
	raw := newRawProv(rawSigner, lb, a.h.Node.FunduqKey(), "raw", rng)
	raw.pauses = true
	raw.start()
	defer raw.close()
	<-client.Ready()
	a.h.Eventually("both providers are registered", func() bool {
		raw.mu.Lock()
		defer raw.mu.Unlock()
		return raw.cur != nil
	})

	// The schedule: the runs, then the fault and where it lands around the
	// pivot run's pause.
	nruns := 4 + rng.IntN(4)
	if v, err := strconv.Atoi(os.Getenv("FUNDUQ_FAILOVER_RUNS")); err == nil && v > 0 {
		nruns = v
	}
	callers := make([]*pauseCaller, nruns)
	for i := range callers {
		c := &pauseCaller{n: i + 1, at: time.Duration(rng.Int64N(int64(chaosSpan))), door: rng.IntN(2), answerDoor: rng.IntN(2),
			think: time.Duration(rng.IntN(300)) * time.Millisecond, agent: "sdk"}
		if rng.IntN(2) == 1 {
			c.agent = "raw"
		}
		if rng.IntN(3) == 0 {
			c.dropAt = 1 + rng.IntN(3)
		}
		if rng.IntN(3) == 0 {
			c.dropAt2 = 1 + rng.IntN(3)
		}
		callers[i] = c
	}
	pivot := callers[rng.IntN(len(callers))]
	// where: "first" after `after` events of the pivot's first round;
	// "paused" once it paused, the pivot answering `answerAfter` after the
	// fault began (while the leader is away, or after the takeover);
	// "answered" as the door took the answer; "answer" after `after`
	// events of the answer's round.
	where := []string{"first", "paused", "paused", "answered", "answer"}[rng.IntN(5)]
	after := 1 + rng.IntN(4)
	answerAfter := time.Duration(rng.Int64N(int64(2 * time.Second)))
	kinds := []string{"handover", "sigterm", "freeze", "cut", "redis"}
	kind := kinds[rng.IntN(len(kinds))]
	freezeFor := chaosTTL + time.Duration(rng.Int64N(int64(2*time.Second)))
	dropRaw := rng.IntN(3) == 0 // the raw provider's link drops just before the fault
	t.Logf("seed %d: %d runs within %v; SDK capacity %v, %d content events every %v; %s; leader %s when run #%d (%s) is at %q (after %d events; answered %v after the fault began), frozen for %v; raw link dropped before: %v",
		seed, len(callers), chaosSpan, capString(sdkCap), sdkEvents, sdkGap, raw, kind, pivot.n, pivot.agent, where, after, answerAfter, freezeFor, dropRaw)
	firstEpoch := leaderEpoch(t, a.h)

	trigger := make(chan struct{})
	var pulled sync.Once
	pull := func() { pulled.Do(func() { close(trigger) }) }
	faultBegan := make(chan struct{})
	hook := func(phase string, n int) {
		switch {
		case phase == where && (phase == "paused" || phase == "answered" || n == after):
			pull()
		}
		if phase == "paused" && where == "paused" {
			<-faultBegan
			time.Sleep(answerAfter)
		}
	}

	began := time.Now()
	var wg sync.WaitGroup
	for _, c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(c.at)
			key := sdkSigner.PublicKeyHex()
			if c.agent == "raw" {
				key = rawSigner.PublicKeyHex()
			}
			h := func(string, int) {}
			if c == pivot {
				h = hook
			}
			c.follow(doors, key, h)
			if c == pivot {
				pull() // a pivot whose stream ended short still lets the fault go
			}
		}()
	}
	<-trigger
	if dropRaw && raw.dropLink() {
		t.Logf("+%v: the raw provider's link dropped", time.Since(began).Round(time.Millisecond))
	}
	t.Logf("+%v: %s %s as run #%d is at %q", time.Since(began).Round(time.Millisecond), kind, a.id, pivot.n, where)
	close(faultBegan)
	switch kind {
	case "handover":
		var out, errb strings.Builder
		if code := run([]string{"lease", "handover", "--wait", "15s"}, env, &out, &errb); code != 0 {
			t.Errorf("lease handover: exit %d: %s %s", code, out.String(), errb.String())
		}
	case "sigterm":
		a.h.Shutdown()
	case "freeze":
		a.freeze()
		time.Sleep(freezeFor)
		a.thaw()
	case "cut":
		a.cut()
	case "redis":
		a.redis.cutAll()
	}
	b.h.Eventually("node-b leads", b.ready)
	t.Logf("+%v: node-b leads", time.Since(began).Round(time.Millisecond))
	wg.Wait()

	// Every run ends without the grace running out (the fake clocks have
	// not moved): each provider behaves and is back within moments.
	var ids []string
	for _, c := range callers {
		if c.err != nil {
			t.Errorf("run #%d (%s): %v", c.n, c.agent, c.err)
		}
		if c.id != "" {
			ids = append(ids, c.id)
		}
	}
	st := b.h.Store
	terminal := func() bool {
		for _, id := range ids {
			r, err := st.GetRun(context.Background(), id)
			if err != nil || !r.Status.Terminal() {
				return false
			}
		}
		return true
	}
	if !until(chaosGuard, terminal) {
		b.h.Advance(chaosGrace + chaosLink + time.Second)
		until(chaosGuard, terminal)
	}
	until(chaosGuard, raw.done)

	for _, c := range callers {
		if c.id == "" {
			continue
		}
		checkPausedRun(t, st, c, doors, func() ([][]byte, string) {
			if c.agent == "raw" {
				evs, _ := raw.expected(c.id)
				raw.mu.Lock()
				defer raw.mu.Unlock()
				r := raw.runs[c.id]
				if r == nil {
					return evs, "never offered"
				}
				return evs, fmt.Sprintf("%d answers", r.answers)
			}
			var evs [][]byte
			for _, answered := range []bool{false, true} {
				for _, ev := range askRound(c.thread, c.id, sdkEvents, answered) {
					evs = append(evs, []byte(ev))
				}
			}
			sdkMu.Lock()
			defer sdkMu.Unlock()
			return evs, fmt.Sprint(sdkCalls[c.id])
		})
		// The handler saw the answer once: the SDK called it twice, the
		// second time with the answer; the raw provider began one
		// answer's round.
		if c.agent == "sdk" {
			sdkMu.Lock()
			if calls := sdkCalls[c.id]; !slices.Equal(calls, []bool{false, true}) {
				t.Errorf("run #%d %s (sdk): handler calls (answered?) %v, want [false true]", c.n, c.id, calls)
			}
			sdkMu.Unlock()
		} else {
			raw.mu.Lock()
			if r := raw.runs[c.id]; r == nil || r.answers != 1 {
				t.Errorf("run #%d %s (raw): the raw provider began %v answer rounds, want 1", c.n, c.id, r.answersOr())
			}
			raw.mu.Unlock()
		}
	}
	raw.mu.Lock()
	if len(raw.odd) > 0 {
		t.Errorf("the raw provider was offered what fits no round: %v", raw.odd)
	}
	raw.mu.Unlock()

	for _, k := range []struct{ name, key string }{{"SDK", sdkSigner.PublicKeyHex()}, {"raw", rawSigner.PublicKeyHex()}} {
		q, err := st.GetQuality(context.Background(), k.key)
		if err != nil && err != store.ErrNotFound {
			t.Fatal(err)
		}
		if q.Misdeclared+q.Unanswered+q.AnsweredLate+q.Abandoned+q.Undelivered > 0 || q.WithdrawnAt != nil {
			t.Errorf("the %s provider, which behaved, was counted: %+v", k.name, q)
		}
	}
	epoch := leaderEpoch(t, b.h)
	if epoch <= firstEpoch {
		t.Errorf("node-b leads under epoch %d, want one after %d", epoch, firstEpoch)
	}
	until(chaosGuard, func() bool { return b.h.Node.Broker.Snapshot().Links == 2 })
	checkConsole(t, b, epoch, sdkSigner.PublicKeyHex(), rawSigner.PublicKeyHex())
	a.restore()
	t.Logf("settled at +%v", time.Since(began).Round(time.Millisecond))
}

// follow starts the caller's run, reads its first round to the paused
// finish, answers q1 at its answer door on the same thread and reads the
// answer's round to its end; either stream may be left after dropAt events
// and resumed at the other door with Last-Event-ID (D9). hook is told of
// each step: ("first", n) and ("answer", n) after each event, ("paused", 0)
// before the answer, ("answered", 0) once the door took it.
func (c *pauseCaller) follow(doors []string, key string, hook func(string, int)) {
	thread := fmt.Sprintf("t-pause-%d-%d", time.Now().UnixNano(), callerSeq.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), chaosGuard)
	defer cancel()
	u := "/agui/" + key + "/" + c.agent
	body := fmt.Sprintf(`{"threadId":%q,"runId":%q,"messages":[{"id":"u1","role":"user","content":"run %d"}]}`, thread, "c1-"+thread, c.n)
	id, n, err := readStreamEach(ctx, http.MethodPost, doors[c.door]+u, body, -1, c.dropAt, &c.first, func(n int) { hook("first", n) })
	c.id = id
	if err == nil && c.dropAt > 0 && n == c.dropAt {
		c.resumed[0] = true
		_, _, err = readStreamEach(ctx, http.MethodGet, doors[1-c.door]+"/runs/"+id+"/events", "", c.first[len(c.first)-1].id, 0, &c.first,
			func(k int) { hook("first", n+k) })
	}
	if err != nil {
		c.err = fmt.Errorf("first round: %w", err)
		return
	}
	if len(c.first) == 0 || !strings.Contains(c.first[len(c.first)-1].data, `"interrupt"`) {
		c.err = fmt.Errorf("the first round's stream did not end paused: %v", c.first)
		return
	}
	// The answer names funduq's thread, which the door's RUN_STARTED
	// carries (design.md §The doors).
	var started struct {
		ThreadID string `json:"threadId"`
	}
	if err := json.Unmarshal([]byte(c.first[0].data), &started); err != nil || started.ThreadID == "" {
		c.err = fmt.Errorf("the first round's stream opened without funduq's thread: %v", c.first)
		return
	}
	c.thread = started.ThreadID
	hook("paused", 0)
	time.Sleep(c.think)
	body = fmt.Sprintf(`{"threadId":%q,"runId":%q,"messages":[],"tools":[],"context":[],"forwardedProps":{},"resume":[{"interruptId":"q1","status":"resolved","payload":"yes"}]}`,
		c.thread, "c2-"+c.thread)
	_, n, err = readStreamEach(ctx, http.MethodPost, doors[c.answerDoor]+u, body, -1, c.dropAt2, &c.second, func(n int) {
		if n == 0 {
			hook("answered", 0)
		}
		hook("answer", n)
	})
	if err == nil && c.dropAt2 > 0 && n == c.dropAt2 {
		c.resumed[1] = true
		_, _, err = readStreamEach(ctx, http.MethodGet, doors[1-c.answerDoor]+"/runs/"+id+"/events", "", c.second[len(c.second)-1].id, 0, &c.second,
			func(k int) { hook("answer", n+k) })
	}
	if err != nil {
		c.err = fmt.Errorf("the answer's round: %w", err)
	}
}

// checkPausedRun checks what the caller of a paused and answered run
// would notice: it completed; the record holds each round's events once,
// in order, as the provider sent them; the caller's two streams gave them
// each once with its seq as id; and the thread holds each round's message
// once.
func checkPausedRun(t *testing.T, st *store.Store, c *pauseCaller, doors []string, sent func() ([][]byte, string)) {
	t.Helper()
	ctx := context.Background()
	r, err := st.GetRun(ctx, c.id)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := st.EventsAfter(ctx, c.id, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var stored []string
	for _, e := range evs {
		stored = append(stored, canon(e.Event))
	}
	want, handler := sent()
	if r.Status != runstatus.Completed {
		t.Errorf("run #%d %s (%s): %s/%s (owner epoch %d), want completed: its provider behaved and came back within the grace; handler: %s; stored %v",
			c.n, c.id, c.agent, r.Status, r.FailureReason, r.OwnerEpoch, handler, stored)
		return
	}
	var wantS []string
	for _, w := range want {
		wantS = append(wantS, canon(w))
	}
	if !slices.Equal(stored, wantS) {
		t.Errorf("run #%d %s (%s): stored events differ from what the provider sent (each round once, in order):\n stored %v\n   sent %v", c.n, c.id, c.agent, stored, wantS)
		return
	}
	// Each stream gives its round's stored events once, in order, with
	// their seq as id (D9): the answer's continues where the pause ended.
	paused := 0
	for i, e := range evs {
		if strings.Contains(string(e.Event), `"interrupt"`) {
			paused = i + 1
			break
		}
	}
	for k, round := range [][]sseEv{c.first, c.second} {
		from, to := 0, paused
		if k == 1 {
			from, to = paused, len(stored)
		}
		var seen, wantR []string
		for i, e := range round {
			if e.id != from+i+1 {
				t.Errorf("run #%d %s (%s): round %d's event %d has id %d, want %d (resumed %v): %v", c.n, c.id, c.agent, k+1, i, e.id, from+i+1, c.resumed[k], round)
				break
			}
			seen = append(seen, canonStream(e.data))
		}
		for _, s := range stored[from:to] {
			wantR = append(wantR, canonStream(s))
		}
		if !slices.Equal(seen, wantR) {
			t.Errorf("run #%d %s (%s): round %d: the caller saw\n %v\nwant the stored\n %v", c.n, c.id, c.agent, k+1, seen, wantR)
		}
	}
	// The thread's record (GET /threads/{id}, any door) holds the
	// caller's message and each round's reply once.
	resp, err := http.Get(doors[c.n%2] + "/threads/" + c.thread)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var snap struct {
		Messages []struct {
			ID      string `json:"id"`
			Role    string `json:"role"`
			Content string `json:"content"`
		} `json:"messages"`
		WaitingRun json.RawMessage `json:"waiting_run"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&snap); err != nil || resp.StatusCode != 200 {
		t.Errorf("run #%d: GET /threads/%s: %d %v", c.n, c.thread, resp.StatusCode, err)
		return
	}
	var got []string
	for _, m := range snap.Messages {
		got = append(got, m.Role+":"+strings.TrimSpace(m.Content))
	}
	prefix := map[string]string{"sdk": "sdk", "raw": "raw"}[c.agent]
	var text []string
	for i := range (len(stored) - 8) / 2 {
		text = append(text, fmt.Sprintf("%s-%d", prefix, i))
	}
	reply := "assistant:" + strings.Join(text, " ")
	wantT := []string{fmt.Sprintf("user:run %d", c.n), reply, reply}
	if !slices.Equal(got, wantT) || len(snap.WaitingRun) > 0 {
		t.Errorf("run #%d %s (%s): the thread holds %q (waiting %s), want %q", c.n, c.id, c.agent, got, snap.WaitingRun, wantT)
	}
}
