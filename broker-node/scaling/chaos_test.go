package scaling

// The seeded failover chaos test (issue 21, point 9). The test command runs
// the default seeds (-chaos.seeds, 1–3); more with scripts/chaos:
//
//	scripts/chaos --seeds 50         # seeds 1–50
//	scripts/chaos --seed 17          # one seed again
//	go test -count=1 -v -run 'TestChaos/seed=17$' ./broker-node/scaling/ -chaos.seeds=17
//
// A seed fixes the schedule — which runs start when, at which door and over
// which protocol, for which provider; the providers' capacities; the moment
// the leader is SIGKILLed or SIGSTOPped (and for how long); the moments a
// provider link is cut without a close frame — not the interleaving of the
// processes, which the machine decides. Every run is checked for the
// invariants below; a failing seed is printed with the command to rerun it.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/wire"
	"github.com/funduq/funduq-go/internal/seeds"
	"github.com/funduq/funduq-go/provider"
)

var (
	chaosSeeds = flag.String("chaos.seeds", "1,2,3", "the chaos test's seeds: a comma-separated list of numbers or ranges a-b")
	chaosRuns  = flag.Int("chaos.runs", 12, "runs per chaos seed")
)

// The schedule's scale.
const (
	chaosWindow  = 2500 * time.Millisecond // runs start within it
	chaosCutSpan = 4 * time.Second         // link cuts happen within it
	scriptMax    = 2 * time.Second         // the longest a provider's script takes
	// linkGrace is the broker's grace for a link dropped without a close
	// frame (issue 21, point 8), passed as FUNDUQ_LINK_GRACE; a broker
	// without the setting ignores it.
	linkGrace = 2 * time.Second
)

func TestChaos(t *testing.T) {
	list, err := seeds.Parse(*chaosSeeds)
	if err != nil {
		t.Fatal(err)
	}
	for _, seed := range list {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Logf("chaos seed %d; rerun with: scripts/chaos --seed %d", seed, seed)
			chaosSeed(t, seed)
			if t.Failed() {
				t.Logf("CHAOS FAILED seed %d; rerun with: scripts/chaos --seed %d", seed, seed)
			}
		})
	}
}

// chaosRun is one run of the schedule.
type chaosRun struct {
	n     int
	at    time.Duration // start offset
	agent string        // "sdk" or "raw"
	key   string        // its provider's key
	door  int
	a2a   bool
	id    string
	began time.Time
	s     *stream // AG-UI only
	w     *stream // a second caller following the run at the other door
	err   error
}

func (r *chaosRun) String() string {
	proto := "AG-UI"
	if r.a2a {
		proto = "A2A"
	}
	return fmt.Sprintf("run #%d %s (%s agent, %s at d%d, +%v)", r.n, r.id, r.agent, proto, r.door+1, r.at)
}

func chaosSeed(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))
	px := newCutProxy(t)
	clusterEnv = []string{"FUNDUQ_ADVERTISE_URL=" + px.url(), "FUNDUQ_LINK_GRACE=" + linkGrace.String()}
	defer func() { clusterEnv = nil }()
	c := newCluster(t, 2, 2)
	c.waitLeader(boot)
	px.setTarget(strings.TrimPrefix(c.balancer(), "http://"))

	bk := newBook()
	sdkCap, rawCap := 1+rng.IntN(3), 1+rng.IntN(3)
	sdkKey, rawKey := newSigner(t, byte(0x40+seed%64)), newSigner(t, byte(0x80+seed%64))
	sdkLog := filepath.Join(c.logDir, "sdk.log")
	c.chaosSDK(sdkKey, px.url(), sdkCap, sdkLog, bk, seed)
	raw := newRawProv(t, c, rawKey, px.url(), rawCap, bk, seed, filepath.Join(c.logDir, "raw.log"))

	// The schedule.
	runs := make([]*chaosRun, *chaosRuns)
	for i := range runs {
		r := &chaosRun{n: i + 1, at: time.Duration(rng.Int64N(int64(chaosWindow))), door: rng.IntN(2), a2a: rng.IntN(2) == 1, agent: "sdk"}
		if rng.IntN(2) == 1 {
			r.agent = "raw"
		}
		runs[i] = r
	}
	faultAt := 300*time.Millisecond + time.Duration(rng.Int64N(int64(chaosWindow-300*time.Millisecond)))
	kill := rng.IntN(2) == 0
	stopFor := 500*time.Millisecond + time.Duration(rng.Int64N(int64(4*time.Second)))
	cuts := make([]time.Duration, rng.IntN(4))
	for i := range cuts {
		cuts[i] = time.Duration(rng.Int64N(int64(chaosCutSpan)))
	}
	slices.Sort(cuts)
	fault := "SIGKILL"
	last := max(faultAt, chaosWindow)
	if !kill {
		fault = fmt.Sprintf("SIGSTOP for %v", stopFor.Round(time.Millisecond))
		last = max(last, faultAt+stopFor)
	}
	if len(cuts) > 0 {
		last = max(last, cuts[len(cuts)-1])
	}
	bound := leaseTTL + providerGrace + linkGrace + deliverTimeout + scriptMax + 2*margin
	t.Logf("seed %d: %d runs within %v; SDK capacity %d, raw capacity %d; leader %s at +%v; link cuts at %v; every run terminal within the last action (+%v) + %v (lease TTL %v + provider grace %v + link grace %v + deliver timeout %v + script %v + 2 × margin %v)",
		seed, len(runs), chaosWindow, sdkCap, rawCap, fault, faultAt.Round(time.Millisecond), cuts, last.Round(time.Millisecond), bound,
		leaseTTL, providerGrace, linkGrace, deliverTimeout, scriptMax, margin)

	began := time.Now()
	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(r.at)
			r.began = time.Now()
			r.key = sdkKey.PublicKeyHex()
			if r.agent == "raw" {
				r.key = rawKey.PublicKeyHex()
			}
			r.id, r.s, r.err = c.chaosStart(c.doors[r.door], r.key, r.agent, r.a2a, fmt.Sprintf("seed %d run %d", seed, r.n))
			if r.err == nil {
				// A second caller follows the run from its start at the
				// other door, through whatever the fault does.
				r.w = c.openStream(http.MethodGet, c.doors[1-r.door].url+"/runs/"+r.id+"/events", "", -1)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(faultAt)
		victim := c.leader()
		if victim == nil {
			t.Logf("no leader at +%v: no fault", faultAt)
			return
		}
		if kill {
			victim.signal(syscall.SIGKILL)
			t.Logf("+%v: SIGKILL %s", time.Since(began).Round(time.Millisecond), victim.name)
			return
		}
		victim.freeze()
		t.Logf("+%v: SIGSTOP %s", time.Since(began).Round(time.Millisecond), victim.name)
		time.Sleep(stopFor)
		victim.thaw()
		t.Logf("+%v: SIGCONT %s", time.Since(began).Round(time.Millisecond), victim.name)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for _, at := range cuts {
			time.Sleep(time.Until(began.Add(at)))
			if n := px.cutOne(rng); n != "" {
				t.Logf("+%v: cut a provider link without a close frame (%s)", time.Since(began).Round(time.Millisecond), n)
			}
		}
	}()
	wg.Wait()

	// Every run terminal within the bound.
	deadline := began.Add(last + bound)
	var started []*chaosRun
	for _, r := range runs {
		if r.err != nil {
			t.Errorf("%s: could not start: %v", r, r.err)
			continue
		}
		started = append(started, r)
	}
	var ids []string
	for _, r := range started {
		ids = append(ids, r.id)
	}
	for {
		open := 0
		for _, r := range started {
			if !terminalStatus(c.run(r.id).Status) {
				open++
			}
		}
		if open == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("all actions done at +%v, runs settled at +%v (deadline +%v)", last.Round(time.Millisecond),
		time.Since(began).Round(time.Millisecond), (last + bound).Round(time.Millisecond))

	// The invariants.
	fail := func(r *chaosRun, format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...)
		if r != nil {
			msg = r.String() + ": " + msg + "\n" + c.excerpt(r.id, sdkLog, raw.logPath)
		}
		t.Error(msg)
	}
	for _, r := range started {
		row := c.run(r.id)
		switch {
		case !terminalStatus(row.Status):
			fail(r, "not terminal within the bound (%v after the last action): %s %s, epoch %d, last_seq %d", bound, row.Status, row.Reason, row.Epoch, row.LastSeq)
		case row.Status != "completed":
			// Every provider re-attaches within moments (backoff ≤ 300 ms),
			// well inside the grace, and behaves: each run must complete.
			fail(r, "ended %s/%s although its provider re-attached within grace", row.Status, row.Reason)
		}
		if r.s != nil {
			select {
			case <-r.s.done:
				checkStream(t, r.String()+" (its AG-UI stream)", r.s.snapshot(), 0, true)
				checkSeen(t, r.String()+" (its AG-UI stream)", r.s.snapshot(), c.events(r.id))
			case <-time.After(margin):
				fail(r, "its AG-UI stream did not end within %v of the run settling: %s", margin, describe(r.s.snapshot()))
			}
		}
		// An A2A caller polling its task at its door afterwards reads it
		// completed, with the whole answer its provider sent.
		if r.a2a {
			state, text, err := c.a2aTask(c.doors[r.door], r.key, r.agent, r.id)
			if want := deltas(c.events(r.id)); err != nil || state != "completed" || text != want {
				fail(r, "its caller's tasks/get: state %q, artifacts %q (%v); want completed with %q", state, text, err, want)
			}
		}
		// A second caller on the run, at the other door, sees the same
		// events in the same order: the stored record, whole, each once
		// (design.md D9: any door serves any run's events from the record).
		what := r.String() + " (a second caller's GET /runs/{id}/events at d" + fmt.Sprint(2-r.door) + ")"
		select {
		case <-r.w.done:
			if r.w.status != http.StatusOK {
				fail(r, "%s: answered %d %q %v", what, r.w.status, r.w.body, r.w.err)
				break
			}
			checkStream(t, what, r.w.snapshot(), 0, true)
			checkSeen(t, what, r.w.snapshot(), c.events(r.id))
		case <-time.After(afterFailover):
			fail(r, "%s did not end within %v of the run settling: %s", what, afterFailover, describe(r.w.snapshot()))
		}
	}
	// No handler started twice; no duplicate stored event; nothing after a
	// terminal event (checkLedger, over the stored record).
	bk.checkOnce(t)
	if len(ids) > 0 {
		c.checkLedger(ids...)
	}
	// No provider is blamed: both behave, so no counter moves.
	st := store.New(c.db, nil)
	for _, k := range []struct{ name, key string }{{"SDK", sdkKey.PublicKeyHex()}, {"raw", rawKey.PublicKeyHex()}} {
		q, err := st.GetQuality(context.Background(), k.key)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			t.Fatal(err)
		}
		if q.Misdeclared+q.Unanswered+q.AnsweredLate+q.Abandoned+q.Undelivered > 0 || q.WithdrawnAt != nil {
			fail(nil, "the %s provider, which behaved, was counted: misdeclared %d unanswered %d answered_late %d abandoned %d undelivered %d withdrawn %v\n%s",
				k.name, q.Misdeclared, q.Unanswered, q.AnsweredLate, q.Abandoned, q.Undelivered, q.WithdrawnAt != nil, c.grepBrokers("provider behaved abnormally", 8))
		}
	}
	// Every report taken (stored) or answered with an error frame.
	raw.checkReports(t, c, ids)
	if t.Failed() {
		keepLogs(t, c.logDir, seed)
	}
}

// checkSeen asserts that each event a caller saw under an id is the stored
// event of that seq (what the door writes into RUN_STARTED and
// RUN_FINISHED — the caller's ids — aside): a caller's view is the record,
// not something beside it.
func checkSeen(t testing.TB, what string, evs []sseEvent, stored []eventRow) {
	t.Helper()
	for _, e := range evs {
		if e.ID == 0 {
			continue // the door's RUN_STARTED or a resume's reopening (not stored events)
		}
		if e.ID > len(stored) {
			t.Errorf("%s: saw event id %d (%s), but the record holds %d events: %s", what, e.ID, e.Data, len(stored), describe(evs))
			return
		}
		if got, want := withoutIDs(e.Data), withoutIDs(stored[e.ID-1].Raw); got != want {
			t.Errorf("%s: event id %d is\n  %s\nbut the record's seq %d is\n  %s", what, e.ID, got, e.ID, want)
			return
		}
	}
}

// withoutIDs is an event as a comparable string (its JSON, keys sorted)
// without threadId and runId, which the door writes (design.md §The doors).
func withoutIDs(s string) string {
	var v map[string]any
	if json.Unmarshal([]byte(s), &v) != nil {
		return s
	}
	delete(v, "threadId")
	delete(v, "runId")
	out, _ := json.Marshal(v)
	return string(out)
}

// keepLogs copies a failed seed's process logs (the brokers', the doors',
// the providers') out of the test's temporary directory, which goes.
func keepLogs(t *testing.T, dir string, seed uint64) {
	dst := filepath.Join(os.TempDir(), "funduq-chaos-logs", fmt.Sprintf("seed-%d-%d", seed, time.Now().Unix()))
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Logf("keeping the logs: %v", err)
		return
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if b, err := os.ReadFile(filepath.Join(dir, e.Name())); err == nil && !e.IsDir() {
			_ = os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644)
		}
	}
	t.Logf("the seed's process logs are kept in %s", dst)
}

// ---------------------------------------------------------------- starting runs

// chaosStart starts a run at door d over AG-UI (keeping the caller's
// stream) or A2A (a non-blocking message/send) and returns its id.
func (c *cluster) chaosStart(d *proc, key, agent string, a2a bool, text string) (string, *stream, error) {
	if a2a {
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"kind":"message","messageId":%q,"role":"user","parts":[{"kind":"text","text":%q}]},"configuration":{"blocking":false}}}`,
			newThreadID(), text)
		resp, err := quickLong.Post(d.url+"/a2a/"+key+"/"+agent, "application/json", strings.NewReader(body))
		if err != nil {
			return "", nil, err
		}
		defer resp.Body.Close()
		var out struct {
			Result struct {
				ID string `json:"id"`
			} `json:"result"`
			Error json.RawMessage `json:"error"`
		}
		b, _ := io.ReadAll(resp.Body)
		if err := json.Unmarshal(b, &out); err != nil || out.Result.ID == "" {
			return "", nil, fmt.Errorf("A2A message/send: %d %s", resp.StatusCode, b)
		}
		return out.Result.ID, nil, nil
	}
	thread := newThreadID()
	body := fmt.Sprintf(`{"threadId":%q,"runId":%q,"messages":[{"id":"u1","role":"user","content":%q}]}`, thread, "caller-"+thread, text)
	s := c.openStream(http.MethodPost, d.url+"/agui/"+key+"/"+agent, body, -1)
	select {
	case <-s.idCh:
		return s.runID, s, nil
	case <-s.done:
		select {
		case <-s.idCh:
			return s.runID, s, nil
		default:
		}
		return "", nil, fmt.Errorf("AG-UI stream ended before naming its run: %d %q %v", s.status, s.body, s.err)
	case <-time.After(margin):
		return "", nil, fmt.Errorf("AG-UI stream named no run within %v", margin)
	}
}

// a2aTask is an A2A caller's tasks/get at door d: the task's state and
// its artifacts' text, in order.
func (c *cluster) a2aTask(d *proc, key, agent, id string) (state, text string, err error) {
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"tasks/get","params":{"id":%q}}`, id)
	resp, err := quickLong.Post(d.url+"/a2a/"+key+"/"+agent, "application/json", strings.NewReader(body))
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out struct {
		Result struct {
			Status struct {
				State string `json:"state"`
			} `json:"status"`
			Artifacts []struct {
				Parts []struct {
					Text string `json:"text"`
				} `json:"parts"`
			} `json:"artifacts"`
		} `json:"result"`
		Error json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(b, &out); err != nil || len(out.Error) > 0 {
		return "", "", fmt.Errorf("tasks/get: %d %s", resp.StatusCode, b)
	}
	var t strings.Builder
	for _, a := range out.Result.Artifacts {
		for _, p := range a.Parts {
			t.WriteString(p.Text)
		}
	}
	return out.Result.Status.State, t.String(), nil
}

// deltas is the text of a run's stored TEXT_MESSAGE_CONTENT events, in
// order: the answer its provider sent.
func deltas(evs []eventRow) string {
	var t strings.Builder
	for _, e := range evs {
		if e.Type != "TEXT_MESSAGE_CONTENT" {
			continue
		}
		var v struct {
			Delta string `json:"delta"`
		}
		_ = json.Unmarshal([]byte(e.Raw), &v)
		t.WriteString(v.Delta)
	}
	return t.String()
}

// ---------------------------------------------------------------- the SDK provider

// chaosSDK runs our SDK with a small capacity and a script of random length.
func (c *cluster) chaosSDK(s *identity.Signer, base string, capacity int, logPath string, bk *book, seed uint64) {
	c.t.Helper()
	f, err := os.Create(logPath)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { f.Close() })
	agent := provider.Agent{Name: "sdk", Handler: func(ctx context.Context, r *provider.Run) error {
		bk.start(r.ID)
		rng := rand.New(rand.NewPCG(seed, uint64(len(r.ID))^uint64(time.Now().UnixNano())))
		if err := r.Emit(ctx, map[string]any{"type": "RUN_STARTED", "threadId": r.ThreadID, "runId": r.ID}); err != nil {
			return err
		}
		if err := r.Emit(ctx, map[string]any{"type": "TEXT_MESSAGE_START", "messageId": r.ID + "-m", "role": "assistant"}); err != nil {
			return err
		}
		for i := range 1 + rng.IntN(4) {
			select {
			case <-time.After(time.Duration(rng.Int64N(int64(250 * time.Millisecond)))):
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			if err := r.Emit(ctx, map[string]any{"type": "TEXT_MESSAGE_CONTENT", "messageId": r.ID + "-m", "delta": fmt.Sprintf("part %d ", i)}); err != nil {
				return err
			}
		}
		if err := r.Emit(ctx, map[string]any{"type": "TEXT_MESSAGE_END", "messageId": r.ID + "-m"}); err != nil {
			return err
		}
		return r.Emit(ctx, map[string]any{"type": "RUN_FINISHED", "threadId": r.ThreadID, "runId": r.ID})
	}}
	c.runSDK(provider.Config{
		BaseURL: base, Signer: s, FunduqKey: c.key, Agents: []provider.Agent{agent},
		MaxConcurrentRuns: &capacity,
		Backoff:           provider.Backoff{Min: 50 * time.Millisecond, Max: 300 * time.Millisecond},
		PingInterval:      400 * time.Millisecond,
		// The cluster's clocks are compressed (lease 2 s, grace 3 s): a
		// dial to a frozen node gives up as quickly.
		Dialer:     &websocket.Dialer{HandshakeTimeout: time.Second},
		HTTPClient: &http.Client{Timeout: time.Second},
		Logger:     slog.New(slog.NewJSONHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
}

// ---------------------------------------------------------------- the raw-wire provider

// rawProv is an independent wire-v4 provider written for this test, the kind
// the reporter used: small capacity, answers offers after 0–200 ms,
// on every new link resends what it reported (each run's ack, events with
// their seq, finish), and answers a re-offer of a run it already ran by
// accepting it without running it again — it never replays on a re-offer.
// It sends a barrier query every 300 ms: an answer means funduq read every
// report sent before it on that link.
type rawProv struct {
	t       testing.TB
	c       *cluster
	signer  *identity.Signer
	key     string
	base    string
	cap     int
	bk      *book
	logPath string
	logf    func(format string, args ...any)

	mu       sync.Mutex
	rng      *rand.Rand
	link     *rawLink
	nlinks   int
	runs     map[string]*rawRun
	inflight int
	links    []*rawLink

	cancel context.CancelFunc
	done   chan struct{}
}

type rawRun struct {
	id, thread string
	frames     [][]byte // ack, events, finish as reported
	reports    []report
	finished   bool
}

type report struct {
	run    string
	seq    int64 // 0 for a finish
	finish bool
}

type rawLink struct {
	n        int
	ws       *websocket.Conn
	dead     chan struct{}
	once     sync.Once
	sent     []report       // reports written on this link, in order
	barriers map[string]int // barrier id → len(sent) when it was sent
	covered  int            // sent[:covered] were read by funduq
	errs     map[string][]string
	nbarrier int
}

func (l *rawLink) kill() { l.once.Do(func() { close(l.dead); _ = l.ws.Close() }) }

func newRawProv(t testing.TB, c *cluster, s *identity.Signer, base string, capacity int, bk *book, seed uint64, logPath string) *rawProv {
	t.Helper()
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	var lmu sync.Mutex
	p := &rawProv{t: t, c: c, signer: s, key: s.PublicKeyHex(), base: base, cap: capacity, bk: bk, logPath: logPath,
		rng: rand.New(rand.NewPCG(seed, 7)), runs: map[string]*rawRun{}, done: make(chan struct{})}
	p.logf = func(format string, args ...any) {
		lmu.Lock()
		defer lmu.Unlock()
		fmt.Fprintf(f, "%s %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	ready := make(chan struct{})
	var once sync.Once
	go func() {
		defer close(p.done)
		for ctx.Err() == nil {
			l, err := p.connect()
			if err != nil {
				p.logf("connect: %v", err)
				p.mu.Lock()
				d := 50*time.Millisecond + time.Duration(p.rng.Int64N(int64(250*time.Millisecond)))
				p.mu.Unlock()
				select {
				case <-ctx.Done():
				case <-time.After(d):
				}
				continue
			}
			once.Do(func() { close(ready) })
			p.serve(ctx, l)
		}
	}()
	t.Cleanup(func() {
		cancel()
		p.mu.Lock()
		if p.link != nil {
			p.link.kill()
		}
		p.mu.Unlock()
		<-p.done
		f.Close()
	})
	select {
	case <-ready:
	case <-time.After(boot):
		t.Fatalf("the raw provider did not register within %v", boot)
	}
	return p
}

// connect runs the ceremony (ticket, hello/welcome, register/registered)
// and resends what it reported, on the new link, before anything else.
func (p *rawProv) connect() (*rawLink, error) {
	hc := &http.Client{Timeout: time.Second}
	resp, err := hc.Post(p.base+"/tickets", "application/json", strings.NewReader(`{"publicKey":"`+p.key+`"}`))
	if err != nil {
		return nil, err
	}
	var tr wire.TicketResponse
	_ = json.NewDecoder(resp.Body).Decode(&tr)
	resp.Body.Close()
	if resp.StatusCode != 201 {
		return nil, fmt.Errorf("ticket: %d", resp.StatusCode)
	}
	if tr.FunduqPublicKey != p.c.key {
		return nil, fmt.Errorf("ticket names funduq key %s", tr.FunduqPublicKey)
	}
	d := websocket.Dialer{HandshakeTimeout: time.Second}
	ws, wresp, err := d.Dial("ws"+strings.TrimPrefix(p.base, "http")+"/ws/provider", nil)
	if err != nil {
		if wresp != nil {
			return nil, fmt.Errorf("dial: %d", wresp.StatusCode)
		}
		return nil, err
	}
	fail := func(err error) (*rawLink, error) { ws.Close(); return nil, err }
	nonce := fmt.Sprintf("%032x", time.Now().UnixNano())
	v := wire.Version
	capacity := p.cap
	hello, _ := json.Marshal(wire.Hello{Type: wire.TypeHello, Version: &v, PublicKey: p.key, Ticket: tr.Ticket, Nonce: nonce,
		Proof: p.signer.Sign(identity.ProviderConnectPayload(tr.FunduqPublicKey, tr.Ticket, nonce)), MaxConcurrentRuns: &capacity})
	_ = ws.SetWriteDeadline(time.Now().Add(time.Second))
	if err := ws.WriteMessage(websocket.TextMessage, hello); err != nil {
		return fail(err)
	}
	_ = ws.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, raw, err := ws.ReadMessage()
	if err != nil {
		return fail(fmt.Errorf("welcome: %w", err))
	}
	var w wire.Welcome
	if json.Unmarshal(raw, &w) != nil || w.Type != wire.TypeWelcome {
		return fail(fmt.Errorf("not a welcome: %s", raw))
	}
	pub, _ := identity.ParsePublicKey(p.c.key)
	if identity.Verify(pub, identity.FunduqConnectPayload(tr.Ticket, nonce), w.Answer) != nil {
		return fail(errors.New("welcome answer does not verify"))
	}
	reg, _ := json.Marshal(wire.Register{Type: wire.TypeRegister, Agents: []wire.Registration{{Name: "raw"}}})
	if err := ws.WriteMessage(websocket.TextMessage, reg); err != nil {
		return fail(err)
	}
	_, raw, err = ws.ReadMessage()
	if err != nil {
		return fail(fmt.Errorf("registered: %w", err))
	}
	if typ, _ := wire.PeekType(raw); typ != wire.TypeRegistered {
		return fail(fmt.Errorf("not registered: %s", raw))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.nlinks++
	l := &rawLink{n: p.nlinks, ws: ws, dead: make(chan struct{}), barriers: map[string]int{}, errs: map[string][]string{}}
	p.link = l
	p.links = append(p.links, l)
	resent := 0
	for _, id := range p.orderLocked() {
		r := p.runs[id]
		for i, fr := range r.frames {
			var rep *report
			if i > 0 {
				rep = &r.reports[i-1]
			}
			if !p.writeLocked(l, fr, rep) {
				return l, nil // serve notices the dead link
			}
			resent++
		}
	}
	p.logf("link %d registered; resent %d frames of %d runs", l.n, resent, len(p.runs))
	return l, nil
}

func (p *rawProv) orderLocked() []string {
	ids := make([]string, 0, len(p.runs))
	for id := range p.runs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// writeLocked writes one frame on l; rep (nil for an ack) is recorded as
// sent on l. p.mu must be held: the frames of a link keep their order.
func (p *rawProv) writeLocked(l *rawLink, data []byte, rep *report) bool {
	select {
	case <-l.dead:
		return false
	default:
	}
	_ = l.ws.SetWriteDeadline(time.Now().Add(time.Second))
	if err := l.ws.WriteMessage(websocket.TextMessage, data); err != nil {
		p.logf("link %d: write: %v", l.n, err)
		l.kill()
		return false
	}
	if rep != nil {
		l.sent = append(l.sent, *rep)
	}
	return true
}

func (p *rawProv) serve(ctx context.Context, l *rawLink) {
	defer func() {
		l.kill()
		p.mu.Lock()
		if p.link == l {
			p.link = nil
		}
		p.mu.Unlock()
		p.logf("link %d ended", l.n)
	}()
	l.ws.SetPongHandler(func(string) error { return l.ws.SetReadDeadline(time.Now().Add(1500 * time.Millisecond)) })
	go func() {
		tick := time.NewTicker(300 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-l.dead:
				return
			case <-ctx.Done():
				l.kill()
				return
			case <-tick.C:
			}
			p.mu.Lock()
			_ = l.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(time.Second))
			l.nbarrier++
			id := fmt.Sprintf("barrier-%d-%d", l.n, l.nbarrier)
			l.barriers[id] = len(l.sent)
			q, _ := json.Marshal(wire.Query{Type: wire.TypeQuery, QueryID: id, Method: "chaos_barrier", Params: json.RawMessage(`{}`)})
			p.writeLocked(l, q, nil)
			p.mu.Unlock()
		}
	}()
	for {
		_ = l.ws.SetReadDeadline(time.Now().Add(1500 * time.Millisecond))
		_, raw, err := l.ws.ReadMessage()
		if err != nil {
			p.logf("link %d: read: %v", l.n, err)
			return
		}
		typ, _ := wire.PeekType(raw)
		switch typ {
		case wire.TypeRun:
			var rf wire.RunFrame
			_ = json.Unmarshal(raw, &rf)
			p.bk.offer(rf.RunID)
			p.mu.Lock()
			d := time.Duration(p.rng.Int64N(int64(200 * time.Millisecond)))
			p.mu.Unlock()
			p.logf("link %d: offer %s (answer in %v)", l.n, rf.RunID, d)
			time.AfterFunc(d, func() { p.answer(l, rf) })
		case wire.TypeError:
			var e wire.Error
			_ = json.Unmarshal(raw, &e)
			p.logf("link %d: error %s", l.n, raw)
			p.mu.Lock()
			l.errs[e.RunID] = append(l.errs[e.RunID], e.Message)
			p.mu.Unlock()
		case wire.TypeQueryResult:
			var qr wire.QueryResult
			_ = json.Unmarshal(raw, &qr)
			p.mu.Lock()
			if n, ok := l.barriers[qr.QueryID]; ok {
				l.covered = max(l.covered, n)
				delete(l.barriers, qr.QueryID)
			}
			p.mu.Unlock()
		default:
			p.logf("link %d: %s", l.n, raw)
		}
	}
}

// answer answers an offer from the provider's own state.
func (p *rawProv) answer(l *rawLink, rf wire.RunFrame) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.link != l {
		return // that link is gone; funduq offers again
	}
	yes, no := true, false
	if p.runs[rf.RunID] != nil {
		// Ran it (or runs it) already: accepted again, not run again and
		// not replayed (what it reported was resent when the link opened).
		b, _ := json.Marshal(wire.Ack{Type: wire.TypeAck, RunID: rf.RunID, Accepted: &yes})
		p.logf("link %d: re-offer of %s accepted without running it again", l.n, rf.RunID)
		p.writeLocked(l, b, nil)
		return
	}
	if p.inflight >= p.cap {
		b, _ := json.Marshal(wire.Ack{Type: wire.TypeAck, RunID: rf.RunID, Accepted: &no})
		p.logf("link %d: declining %s: full (%d of %d)", l.n, rf.RunID, p.inflight, p.cap)
		p.writeLocked(l, b, nil)
		return
	}
	thread := ""
	if rf.ThreadID != nil {
		thread = *rf.ThreadID
	}
	r := &rawRun{id: rf.RunID, thread: thread}
	b, _ := json.Marshal(wire.Ack{Type: wire.TypeAck, RunID: rf.RunID, Accepted: &yes})
	r.frames = append(r.frames, b)
	p.runs[r.id] = r
	p.inflight++
	p.bk.start(r.id)
	p.logf("link %d: accepting %s", l.n, r.id)
	p.writeLocked(l, b, nil)
	n := 1 + p.rng.IntN(4)
	delays := make([]time.Duration, n+3)
	for i := range delays {
		delays[i] = time.Duration(p.rng.Int64N(int64(150 * time.Millisecond)))
	}
	go p.script(r, n, delays)
}

func (p *rawProv) script(r *rawRun, n int, delays []time.Duration) {
	evs := []string{startedEv(r.thread, r.id), `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`}
	for i := range n {
		evs = append(evs, deltaEv("m1", fmt.Sprintf("part %d ", i)))
	}
	evs = append(evs, `{"type":"TEXT_MESSAGE_END","messageId":"m1"}`, finishedEv(r.thread, r.id))
	for i, ev := range evs {
		if i > 0 {
			time.Sleep(delays[min(i-1, len(delays)-1)])
		}
		seq := int64(i + 1)
		b, _ := json.Marshal(wire.Event{Type: wire.TypeEvent, RunID: r.id, ProviderSeq: &seq, Event: json.RawMessage(ev)})
		p.report(r, b, report{run: r.id, seq: seq})
	}
	b, _ := json.Marshal(wire.Finish{Type: wire.TypeFinish, RunID: r.id})
	p.report(r, b, report{run: r.id, finish: true})
}

// report records a frame as reported and writes it if a link is up (a
// frame reported while down goes out with the next link's resend).
func (p *rawProv) report(r *rawRun, data []byte, rep report) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r.frames = append(r.frames, data)
	r.reports = append(r.reports, rep)
	if rep.finish {
		r.finished = true
		p.inflight--
	}
	if p.link != nil {
		p.writeLocked(p.link, data, &rep)
	}
}

// checkReports asserts that every event or finish funduq read (a barrier
// sent after it was answered on the same link) was taken — the event
// stored under its seq, the run terminal — or answered with an error frame
// naming its run on that link.
func (p *rawProv) checkReports(t *testing.T, c *cluster, ids []string) {
	t.Helper()
	// Let the current link's barrier cover its last reports.
	ok, _ := until(margin, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.link != nil && p.link.covered == len(p.link.sent)
	})
	if !ok {
		t.Logf("the raw provider's last link did not cover all its reports within %v", margin)
	}
	stored := map[report]bool{}
	rows, err := c.db.Query(context.Background(), `SELECT run_id, provider_seq FROM run_events WHERE provider_seq IS NOT NULL AND run_id = ANY($1)`, ids)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var r report
		if err := rows.Scan(&r.run, &r.seq); err != nil {
			t.Fatal(err)
		}
		stored[r] = true
	}
	rows.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	lost := map[string][]string{}
	for _, l := range p.links {
		for _, rep := range l.sent[:l.covered] {
			if len(l.errs[rep.run]) > 0 {
				continue
			}
			if rep.finish {
				if terminalStatus(c.run(rep.run).Status) {
					continue
				}
				lost[rep.run] = append(lost[rep.run], fmt.Sprintf("finish on link %d", l.n))
				continue
			}
			if !stored[rep] {
				lost[rep.run] = append(lost[rep.run], fmt.Sprintf("event seq %d on link %d", rep.seq, l.n))
			}
		}
	}
	for _, id := range slices.Sorted(mapsKeys(lost)) {
		t.Errorf("run %s: reports funduq read but neither stored nor answered with an error frame: %s\n%s",
			id, strings.Join(lost[id], ", "), c.excerpt(id, p.logPath))
	}
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// ---------------------------------------------------------------- the cutting proxy

// cutProxy is a TCP proxy in front of the balancer that every provider
// dials (and every broker advertises, so a standby's redirect comes back
// through it). cutOne closes one WebSocket connection at both ends without
// a close frame: a network failure, not a goodbye.
type cutProxy struct {
	t      testing.TB
	ln     net.Listener
	mu     sync.Mutex
	target string
	conns  map[*pipe]bool
	wg     sync.WaitGroup
}

type pipe struct {
	a, b net.Conn
	ws   bool
}

func newCutProxy(t testing.TB) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	px := &cutProxy{t: t, ln: ln, conns: map[*pipe]bool{}}
	px.wg.Add(1)
	go px.accept()
	t.Cleanup(func() {
		ln.Close()
		px.mu.Lock()
		for p := range px.conns {
			p.a.Close()
			p.b.Close()
		}
		px.mu.Unlock()
		px.wg.Wait()
	})
	return px
}

func (px *cutProxy) url() string { return "http://" + px.ln.Addr().String() }

func (px *cutProxy) setTarget(hostport string) {
	px.mu.Lock()
	px.target = hostport
	px.mu.Unlock()
}

func (px *cutProxy) accept() {
	defer px.wg.Done()
	for {
		a, err := px.ln.Accept()
		if err != nil {
			return
		}
		px.mu.Lock()
		target := px.target
		px.mu.Unlock()
		b, err := net.DialTimeout("tcp", target, time.Second)
		if err != nil {
			a.Close()
			continue
		}
		p := &pipe{a: a, b: b}
		px.mu.Lock()
		px.conns[p] = true
		px.mu.Unlock()
		px.wg.Add(2)
		go func() {
			defer px.wg.Done()
			buf := make([]byte, 32<<10)
			first := true
			for {
				n, err := a.Read(buf)
				if n > 0 {
					if first && bytes.Contains(bytes.ToLower(buf[:n]), []byte("upgrade: websocket")) {
						px.mu.Lock()
						p.ws = true
						px.mu.Unlock()
					}
					first = false
					if _, werr := b.Write(buf[:n]); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			a.Close()
			b.Close()
		}()
		go func() {
			defer px.wg.Done()
			_, _ = io.Copy(a, b)
			a.Close()
			b.Close()
			px.mu.Lock()
			delete(px.conns, p)
			px.mu.Unlock()
		}()
	}
}

// cutOne cuts one live WebSocket connection chosen by rng and names it.
func (px *cutProxy) cutOne(rng *rand.Rand) string {
	px.mu.Lock()
	var ws []*pipe
	for p := range px.conns {
		if p.ws {
			ws = append(ws, p)
		}
	}
	px.mu.Unlock()
	if len(ws) == 0 {
		return ""
	}
	slices.SortFunc(ws, func(x, y *pipe) int { return strings.Compare(x.a.RemoteAddr().String(), y.a.RemoteAddr().String()) })
	p := ws[rng.IntN(len(ws))]
	// SetLinger(0): a reset, as a network failure would look.
	if tc, ok := p.a.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	if tc, ok := p.b.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	p.a.Close()
	p.b.Close()
	return p.a.RemoteAddr().String()
}

// ---------------------------------------------------------------- diagnosis

// excerpt gathers the log lines naming id from the brokers and the given
// provider logs (the last few of each).
func (c *cluster) excerpt(id string, logs ...string) string {
	var b strings.Builder
	for _, p := range c.procs {
		if p.kind != "broker" {
			continue
		}
		lines := lastLines(p.grep(id), 8)
		if lines != "" {
			fmt.Fprintf(&b, "  -- %s (%s):\n%s\n", p.name, p.logPath, indent(lines))
		}
	}
	for _, path := range logs {
		raw, _ := os.ReadFile(path)
		var hits []string
		for _, l := range strings.Split(string(raw), "\n") {
			if strings.Contains(l, id) {
				hits = append(hits, l)
			}
		}
		if len(hits) > 0 {
			fmt.Fprintf(&b, "  -- %s:\n%s\n", path, indent(lastLines(strings.Join(hits, "\n"), 8)))
		}
	}
	return b.String()
}

func (c *cluster) grepBrokers(s string, n int) string {
	var b strings.Builder
	for _, p := range c.procs {
		if p.kind == "broker" {
			if lines := lastLines(p.grep(s), n); lines != "" {
				fmt.Fprintf(&b, "  -- %s:\n%s\n", p.name, indent(lines))
			}
		}
	}
	return b.String()
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) == 1 && lines[0] == "" {
		return ""
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func indent(s string) string { return "    " + strings.ReplaceAll(s, "\n", "\n    ") }
