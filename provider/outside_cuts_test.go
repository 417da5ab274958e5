package provider_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/broker-node/tickets"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/provider"
)

// cutter is a TCP proxy in front of a node whose connections the test
// cuts at will: the provider link dropped at a random moment.
type cutter struct {
	ln    net.Listener
	mu    sync.Mutex
	conns map[net.Conn]bool
	cuts  atomic.Int32
	links atomic.Int32 // the provider's links registered (logger)
	wg    sync.WaitGroup
}

func newCutter(t *testing.T, target string) *cutter {
	t.Helper()
	c := &cutter{conns: make(map[net.Conn]bool)}
	c.ln = relayTo(t, target, &c.wg, func(in, out net.Conn) {
		c.mu.Lock()
		c.conns[in], c.conns[out] = true, true
		c.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			defer c.wg.Done()
			_, _ = io.Copy(dst, src)
			dst.Close()
			src.Close()
			c.mu.Lock()
			delete(c.conns, dst)
			delete(c.conns, src)
			c.mu.Unlock()
		}
		c.wg.Add(2)
		go pipe(in, out)
		go pipe(out, in)
	})
	t.Cleanup(func() { c.ln.Close(); c.cut(); c.wg.Wait() })
	return c
}

// relayTo listens on a local port and, for each connection it accepts,
// dials target and hands both ends to pair (an accepted connection whose
// dial fails is closed), until the listener it returns is closed. wg
// counts the accepting goroutine; pair adds its own to it.
func relayTo(t *testing.T, target string, wg *sync.WaitGroup, pair func(in, out net.Conn)) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			pair(in, out)
		}
	}()
	return ln
}

func (c *cutter) url() string { return "http://" + c.ln.Addr().String() }

// cut drops every connection through the proxy now.
func (c *cutter) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.conns) > 0 {
		c.cuts.Add(1)
	}
	for conn := range c.conns {
		conn.Close()
	}
}

// cutNode starts a node that keeps a lost link's runs for 5 s and its
// provider's for 30 s, and a proxy to it that the test cuts. It takes a
// key's tickets without limit: every cut costs the provider a ticket for
// its next link, and the harness's fake clock, which these tests never
// move, never ends the minute FUNDUQ_TICKETS_PER_MINUTE counts them in,
// so the limit would be one on the links a test may ever open — which a
// cut storm on a loaded machine passes (TestOutsideCutNodeTakesALinkAfterEveryCut).
// The limit is not what these tests are about (broker-node/node
// TestStrangerCannotUseUpAnotherKeysTickets is); with a real clock it
// costs a provider cut that often the rest of the minute.
func cutNode(t *testing.T) (*nodetest.Harness, *cutter) {
	t.Helper()
	h := nodetest.Start(t, func(c *config.Broker) {
		c.LinkGrace = 5 * time.Second
		c.ProviderGrace = 30 * time.Second
		c.TicketsPerMinute = math.MaxInt32
	})
	return h, newCutter(t, strings.TrimPrefix(h.URL, "http://"))
}

// waitEnds waits for run id to end; giving up, it says where the run
// stands (row, events, lane) and how many cuts there were.
func waitEnds(h *nodetest.Harness, id string, proxy *cutter) {
	h.EventuallyExplained("run "+id+" ends", func() bool { return h.Run(id).Status.Terminal() }, func() string {
		return fmt.Sprintf("%s; %d cuts, %d links registered", h.DescribeRun(id), proxy.cuts.Load(), proxy.links.Load())
	})
}

// registrations is a provider's log handler that counts its registers
// ("provider registered"): the SDK's own account of each new link. It
// hands every record on to next, when there is one.
type registrations struct {
	n    *atomic.Int32
	next slog.Handler
}

func (r registrations) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || r.next != nil && r.next.Enabled(ctx, l)
}

func (r registrations) WithAttrs(as []slog.Attr) slog.Handler {
	if r.next != nil {
		r.next = r.next.WithAttrs(as)
	}
	return r
}

func (r registrations) WithGroup(g string) slog.Handler {
	if r.next != nil {
		r.next = r.next.WithGroup(g)
	}
	return r
}

func (r registrations) Handle(ctx context.Context, rec slog.Record) error {
	if rec.Message == "provider registered" {
		r.n.Add(1)
	}
	if r.next != nil && r.next.Enabled(ctx, rec.Level) {
		return r.next.Handle(ctx, rec)
	}
	return nil
}

// logger is a provider logger for the tests through c: it logs beside
// the node (h.Log) and counts the provider's links in c.links.
func (c *cutter) logger(h *nodetest.Harness) *slog.Logger {
	return slog.New(registrations{n: &c.links, next: h.Log.With("side", "sdk").Handler()})
}

// The cut tests' node takes the provider's next link after every cut,
// however many there were. Each link claims a ticket, and the tickets a
// key claims are counted per minute of the node's clock
// (FUNDUQ_TICKETS_PER_MINUTE, design.md §The provider wire): the
// harness's fake clock never ends that minute, so under the default 60 a
// storm's 61st link was refused for good, and every run it had not ended
// then stayed queued or held — on a loaded machine, where the same storm
// outlasts more links, "gave up waiting: run … ends". Cut here once the
// provider registered each link, never mid-handshake: one ticket a link.
func TestOutsideCutNodeTakesALinkAfterEveryCut(t *testing.T) {
	h, proxy := cutNode(t)
	s := outsideSigner(t, 0x6f)
	cfg := outsideConfig(h, s, proxy.logger(h), provider.Agent{Name: "echo", Handler: func(ctx context.Context, r *provider.Run) error {
		if err := started(ctx, r); err != nil {
			return err
		}
		return finished(ctx, r)
	}})
	cfg.BaseURL = proxy.url()
	c, err := provider.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, c)
	const links = tickets.DefaultPerMinute + 1
	for i := int32(1); i < links; i++ {
		h.Eventually(fmt.Sprintf("link %d registered", i), func() bool { return proxy.links.Load() >= i })
		proxy.cut()
	}
	h.Eventually(fmt.Sprintf("link %d registered", links), func() bool { return proxy.links.Load() >= links })
	id, _ := h.Door(s.PublicKeyHex(), "echo", "", "after the cuts")
	waitEnds(h, id, proxy)
	if r := h.Run(id); r.Status != run.Completed {
		t.Fatalf("run %s: %s (%s), want completed", id, r.Status, r.FailureReason)
	}
}

// startedOnce fails t unless the handler started run id exactly once
// (starts, guarded by mu, counts its starts).
func startedOnce(t *testing.T, mu *sync.Mutex, starts map[string]int, id string) {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	if starts[id] != 1 {
		t.Errorf("run %s: handler started %d times", id, starts[id])
	}
}

// stormCuts ends a storm (cutAtRandom): a link lives at most the 40 ms
// between two cuts, and on a loaded machine a link's ceremony outlasts
// that — a provider opening 200 links a minute registered 7, and a test's
// runs ended two in a minute, starved, not stalled. A storm of 300 cuts
// (a test on an idle machine ends its runs within 150) leaves what it
// asserts, that every run ends once the cuts stop, true on any machine.
const stormCuts = 300

// cutAtRandom cuts every connection through the proxy at moments drawn
// from rng (0–40 ms apart) until the returned stop, or until stormCuts
// cuts; stop waits for the cutting to end and logs how many cuts there
// were.
func (c *cutter) cutAtRandom(t *testing.T, rng *rand.Rand) (stop func()) {
	stopCuts, cutsDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(cutsDone)
		for c.cuts.Load() < stormCuts {
			select {
			case <-stopCuts:
				return
			case <-time.After(time.Duration(rng.IntN(40)) * time.Millisecond):
				c.cut()
			}
		}
	}()
	return func() {
		close(stopCuts)
		<-cutsDone
		t.Logf("%d cuts, %d links registered", c.cuts.Load(), c.links.Load())
	}
}

// Runs stream through a link cut at seeded random moments (mid-offer,
// mid-stream, between an event and the finish, during the handshake):
// every run completes, its handler ran once, and its caller sees every
// event once, in the order emitted; nothing is counted against the key.
// The node keeps a lost link's runs for the default FUNDUQ_LINK_GRACE
// (its fake clock never runs it out); with none (0) a run held by a lost
// link fails provider_left_holding_it at once, as configured.
func TestOutsideLinkCutAtRandomMoments(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { linkCutsAtRandom(t, seed) })
	}
}

func linkCutsAtRandom(t *testing.T, seed uint64) {
	h, proxy := cutNode(t)
	s := outsideSigner(t, 0x70+byte(seed))
	const runs, each = 6, 20
	var mu sync.Mutex
	starts := make(map[string]int)
	cfg := outsideConfig(h, s, proxy.logger(h), provider.Agent{Name: "stream", Handler: func(ctx context.Context, r *provider.Run) error {
		mu.Lock()
		starts[r.ID]++
		mu.Unlock()
		if err := started(ctx, r); err != nil {
			return err
		}
		for i := range each {
			if err := r.Emit(ctx, map[string]any{"type": "CUSTOM", "name": "n", "value": i}); err != nil {
				return err
			}
			time.Sleep(time.Millisecond)
		}
		return finished(ctx, r)
	}})
	cfg.BaseURL = proxy.url()
	c, err := provider.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, c)

	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	stopCuts := proxy.cutAtRandom(t, rng)
	ids := make([]string, runs)
	for i := range ids {
		ids[i], _ = h.Door(s.PublicKeyHex(), "stream", "", fmt.Sprint("go ", i))
	}
	for _, id := range ids {
		waitEnds(h, id, proxy)
	}
	stopCuts()
	for _, id := range ids {
		if st := h.Run(id).Status; st != run.Completed {
			t.Errorf("run %s: %s (%s), want completed", id, st, h.Run(id).FailureReason)
			continue
		}
		evs := h.Events(id)
		var got []string
		for _, e := range evs {
			got = append(got, fmt.Sprint(e["type"], e["value"]))
		}
		want := []string{"RUN_STARTED<nil>"}
		for i := range each {
			want = append(want, fmt.Sprint("CUSTOM", i))
		}
		want = append(want, "RUN_FINISHED<nil>")
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("run %s stored\n%v\nwant\n%v", id, got, want)
		}
		startedOnce(t, &mu, starts, id)
	}
	if q := h.Quality(s.PublicKeyHex()); q.Abandoned != 0 || q.Unanswered != 0 {
		t.Errorf("quality %+v", q)
	}
}

// A declared capacity held through seeded link cuts: never more runs at
// once than declared, every run handled once and completed, nothing
// counted against the key (misdeclared included).
func TestOutsideCapacityThroughLinkCuts(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { capacityThroughCuts(t, seed) })
	}
}

func capacityThroughCuts(t *testing.T, seed uint64) {
	h, proxy := cutNode(t)
	s := outsideSigner(t, 0xa0+byte(seed))
	const limit, runs, each = 2, 8, 10
	var mu sync.Mutex
	starts := map[string]int{}
	active, peak := 0, 0
	cfg := outsideConfig(h, s, proxy.logger(h), provider.Agent{Name: "cap", Handler: func(ctx context.Context, r *provider.Run) error {
		mu.Lock()
		starts[r.ID]++
		active++
		peak = max(peak, active)
		mu.Unlock()
		defer func() { mu.Lock(); active--; mu.Unlock() }()
		if err := started(ctx, r); err != nil {
			return err
		}
		for i := range each {
			if err := r.Emit(ctx, map[string]any{"type": "CUSTOM", "name": "n", "value": i}); err != nil {
				return err
			}
			time.Sleep(time.Millisecond)
		}
		return finished(ctx, r)
	}})
	cfg.BaseURL = proxy.url()
	cfg.MaxConcurrentRuns = nodetest.Limit(limit)
	c, err := provider.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, c)
	rng := rand.New(rand.NewPCG(seed, 0xca9))
	stopCuts := proxy.cutAtRandom(t, rng)
	ids := make([]string, runs)
	for i := range ids {
		ids[i], _ = h.Door(s.PublicKeyHex(), "cap", "", fmt.Sprint("go ", i))
	}
	for _, id := range ids {
		waitEnds(h, id, proxy)
	}
	stopCuts()
	for _, id := range ids {
		if r := h.Run(id); r.Status != run.Completed {
			t.Errorf("run %s: %s (%s)", id, r.Status, r.FailureReason)
		}
		if n := len(h.Events(id)); n != each+2 {
			t.Errorf("run %s: %d events stored, want %d", id, n, each+2)
		}
		startedOnce(t, &mu, starts, id)
	}
	if peak > limit {
		t.Errorf("%d runs at once, declared %d", peak, limit)
	}
	if q := h.Quality(s.PublicKeyHex()); q.Abandoned != 0 || q.Unanswered != 0 || q.Misdeclared != 0 || q.AnsweredLate != 0 {
		t.Errorf("quality %+v", q)
	}
}

// SerializePerThread through seeded link cuts: runs of one thread are
// handled one at a time in the order they were made, each once, and all
// complete.
func TestOutsideSerializePerThreadThroughLinkCuts(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { serializedThroughCuts(t, seed) })
	}
}

func serializedThroughCuts(t *testing.T, seed uint64) {
	h, proxy := cutNode(t)
	s := outsideSigner(t, 0xb0+byte(seed))
	const threads, perThread, each = 2, 4, 8
	var mu sync.Mutex
	order := map[string][]string{} // thread → run ids in handling order
	busy := map[string]bool{}
	var overlap []string
	cfg := outsideConfig(h, s, proxy.logger(h), provider.Agent{Name: "ser", Handler: func(ctx context.Context, r *provider.Run) error {
		mu.Lock()
		if busy[r.ThreadID] {
			overlap = append(overlap, r.ID)
		}
		busy[r.ThreadID] = true
		order[r.ThreadID] = append(order[r.ThreadID], r.ID)
		mu.Unlock()
		defer func() { mu.Lock(); busy[r.ThreadID] = false; mu.Unlock() }()
		if err := started(ctx, r); err != nil {
			return err
		}
		for i := range each {
			if err := r.Emit(ctx, map[string]any{"type": "CUSTOM", "name": "n", "value": i}); err != nil {
				return err
			}
			time.Sleep(time.Millisecond)
		}
		return finished(ctx, r)
	}})
	cfg.BaseURL = proxy.url()
	cfg.SerializePerThread = true
	c, err := provider.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, c)
	rng := rand.New(rand.NewPCG(seed, 0x5e7))
	stopCuts := proxy.cutAtRandom(t, rng)
	made := map[string][]string{}
	var all []string
	tids := make([]string, threads)
	for i := range perThread {
		for j := range tids {
			id, th := h.Door(s.PublicKeyHex(), "ser", tids[j], fmt.Sprint("turn ", i))
			tids[j] = th
			made[th] = append(made[th], id)
			all = append(all, id)
		}
	}
	for _, id := range all {
		waitEnds(h, id, proxy)
	}
	stopCuts()
	for _, id := range all {
		if r := h.Run(id); r.Status != run.Completed {
			t.Errorf("run %s: %s (%s)", id, r.Status, r.FailureReason)
		}
		if n := len(h.Events(id)); n != each+2 {
			t.Errorf("run %s: %d events stored, want %d", id, n, each+2)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(overlap) > 0 {
		t.Errorf("runs handled while another of their thread was: %v", overlap)
	}
	for th, ids := range made {
		if fmt.Sprint(order[th]) != fmt.Sprint(ids) {
			t.Errorf("thread %s handled %v, made %v", th, order[th], ids)
		}
	}
	if q := h.Quality(s.PublicKeyHex()); q.Abandoned != 0 || q.Unanswered != 0 || q.Misdeclared != 0 {
		t.Errorf("quality %+v", q)
	}
}
