package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/funduq/funduq-go/broker-node/intake"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/runinput"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/store/storetest"
	"github.com/funduq/funduq-go/core/wire"
)

// The lane's own test harness: a broker leading on a fresh migrated
// database (storetest), a fake clock for every wait of design.md's
// "Timers", and fake links that record what the broker sends. Reports are
// fed through the broker's entry points (Attach, Register, Ack, Event,
// Finish, Detach, Notify), as the link package and the intake listener
// call them; no node, HTTP server or WebSocket is started.

// guard bounds every wait here. It is a hang detector, never a timing
// assertion: a healthy lane acts in milliseconds.
const guard = 15 * time.Second

type harness struct {
	t     *testing.T
	st    *store.Store
	clock *clockwork.FakeClock
	set   Settings
	b     *Broker
	epoch int64
	stop  context.CancelFunc
	done  chan error
}

func testLogger() *slog.Logger {
	if os.Getenv("FUNDUQ_TEST_LOG") != "" {
		return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// newHarness starts a broker leading on a fresh database. set's zero
// fields take the broker's defaults (design.md: deliver 5s, unserved 45s).
//
// Each harness has its own database, broker and clock, so the lane tests
// run in parallel: their time is mostly PostgreSQL's commits.
func newHarness(t *testing.T, set Settings) *harness {
	t.Helper()
	t.Parallel()
	st := storetest.Store(t)
	h := &harness{t: t, st: st, set: set,
		clock: clockwork.NewFakeClockAt(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))}
	h.lead()
	return h
}

// lead starts a new broker on h's store and clock under the next epoch,
// as a node does when it wins the lease.
func (h *harness) lead() {
	h.t.Helper()
	epoch, err := h.st.AdvanceEpoch(context.Background(), "lanetest")
	if err != nil {
		h.t.Fatal(err)
	}
	h.epoch = epoch
	h.b = New(Options{Store: h.st, Clock: h.clock, Logger: testLogger(), Settings: h.set})
	ctx, cancel := context.WithCancel(context.Background())
	h.stop, h.done = cancel, make(chan error, 1)
	b := h.b
	go func() { h.done <- b.Run(ctx, epoch, nil) }()
	h.t.Cleanup(h.shutdown)
	h.eventually("the broker leads", func() bool { ok, e := b.Leading(); return ok && e == epoch })
}

// shutdown ends the leadership and waits until every lane has stopped.
func (h *harness) shutdown() {
	if h.stop == nil {
		return
	}
	h.stop()
	h.stop = nil
	select {
	case err := <-h.done:
		if err != nil {
			h.t.Errorf("broker: %v", err)
		}
	case <-time.After(guard):
		h.t.Error("broker did not stop")
	}
}

func (h *harness) eventually(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(guard)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// settle waits until every lane has handled everything in its queue
// (Broker.Idle): the barrier before a negative claim.
func (h *harness) settle() {
	h.t.Helper()
	h.eventually("the broker settles", h.b.Idle)
}

// door inserts a run on a new thread as a door does (one transaction:
// thread, run, its message) and notifies the broker as the intake listener
// would.
func (h *harness) door(key, agent, text string) (runID, threadID string) {
	h.t.Helper()
	threadID = run.NewThreadID()
	return h.doorOn(key, agent, threadID, "", text, true), threadID
}

// doorOn is door on thread (created when create), for a run addressing the
// live run addressed when it is not "" (an interjection).
func (h *harness) doorOn(key, agent, thread, addressed, text string, create bool) string {
	h.t.Helper()
	runID := run.NewRunID()
	in, err := runinput.Build(runinput.Request{ThreadID: thread, RunID: runID, AddressedRunID: addressed,
		Messages: []json.RawMessage{json.RawMessage(fmt.Sprintf(`{"id":"c1","role":"user","content":%q}`, text))}})
	if err != nil {
		h.t.Fatal(err)
	}
	nr := store.NewRun{RunID: runID, ThreadID: thread, ProviderKey: key, AgentName: agent, RunInput: in.Bytes,
		AddressedRunID: in.AddressedRunID}
	if create {
		nr.CreateThread = &store.NewThread{}
	}
	for i, id := range in.MessageIDs {
		nr.Messages = append(nr.Messages, store.Message{MessageID: id, Message: in.Input.Messages[i]})
	}
	if _, _, err := h.st.CreateRun(context.Background(), nr); err != nil {
		h.t.Fatal(err)
	}
	h.b.Notify(context.Background(), intake.Notice{Kind: intake.Queued, RunID: runID})
	return runID
}

// cancel requests a cancel as a door does, and notifies the broker.
func (h *harness) cancel(runID string) {
	h.t.Helper()
	if _, err := h.st.RequestCancel(context.Background(), runID, ""); err != nil {
		h.t.Fatal(err)
	}
	h.b.Notify(context.Background(), intake.Notice{Kind: intake.Cancel, RunID: runID})
}

func (h *harness) run(id string) store.Run {
	h.t.Helper()
	r, err := h.st.GetRun(context.Background(), id)
	if err != nil {
		h.t.Fatal(err)
	}
	return r
}

func (h *harness) waitStatus(id string, want run.Status) store.Run {
	h.t.Helper()
	var r store.Run
	h.eventually(fmt.Sprintf("run %s reaches %s", id, want), func() bool { r = h.run(id); return r.Status == want })
	return r
}

// events returns the run's stored events' types, in order.
func (h *harness) events(id string) []string {
	h.t.Helper()
	evs, err := h.st.EventsAfter(context.Background(), id, 0, 1000)
	if err != nil {
		h.t.Fatal(err)
	}
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i], _ = wire.PeekType(e.Event)
	}
	return out
}

func (h *harness) quality(key string) store.Quality {
	h.t.Helper()
	q, err := h.st.GetQuality(context.Background(), key)
	if err != nil {
		h.t.Fatal(err)
	}
	return q
}

// advance moves the fake clock. What it fires (an offer's lapse, a grace,
// the sweep) acts on its own goroutines: a test waits for the effect it
// expects, then settles, before it claims that nothing else happened.
func (h *harness) advance(d time.Duration) { h.clock.Advance(d) }

// sweepAt moves the fake clock by d (at least the sweep interval) and waits
// until a sweep pass has looked at the new time: the sweep's timer is armed
// before each pass, so the move fires it, and a pass that read the clock
// before the move is followed by one that reads it after. Before the move,
// timers is the clock's waiters when the sweep is idle (its own timer and
// any lane timers that d does not fire). Then it settles what the pass
// pushed to the lanes.
func (h *harness) sweepAt(d time.Duration, timers int) {
	h.t.Helper()
	h.settle()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	if err := h.clock.BlockUntilContext(ctx, timers); err != nil {
		h.t.Fatalf("the sweep is not waiting on the clock: %v", err)
	}
	h.clock.Advance(d)
	at := h.clock.Now().UnixNano()
	h.eventually("a sweep pass at the new time", func() bool { return h.b.sweptAt.Load() >= at })
	h.settle()
}

// fakeLink is a provider's link as the broker sees it: Send and SendNow
// record the frame (the broker's call returns once it is recorded, so a
// settled broker has recorded everything its lanes sent).
type fakeLink struct {
	t      *testing.T
	h      *harness
	key    string
	mu     sync.Mutex
	frames [][]byte
	read   int // frames already taken by next
	closed string
	// closeGate, when set, holds Close (and with it the broker's
	// teardown) open until it is closed; closing is closed once Close is
	// entered. The link stays open meanwhile, as a real link is until its
	// close frame goes.
	closeGate, closing chan struct{}
}

// connect opens a link for the key of seed and attaches it (the
// handshake's end). declared is its maxConcurrentRuns (nil: unlimited).
func (h *harness) connect(seed byte, declared *int) *fakeLink {
	h.t.Helper()
	s, err := identity.NewSignerFromSeedHex(strings.Repeat(fmt.Sprintf("%02x", seed), 32))
	if err != nil {
		h.t.Fatal(err)
	}
	l := &fakeLink{t: h.t, h: h, key: s.PublicKeyHex()}
	if err := h.b.Attach(l, declared); err != nil {
		h.t.Fatal(err)
	}
	return l
}

func (l *fakeLink) Key() string { return l.key }

func (l *fakeLink) Send(frame []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed != "" {
		return fmt.Errorf("link closed: %s", l.closed)
	}
	l.frames = append(l.frames, append([]byte(nil), frame...))
	return nil
}

func (l *fakeLink) SendNow(frame []byte) error { return l.Send(frame) }

func (l *fakeLink) Close(reason string) {
	if l.closeGate != nil {
		close(l.closing)
		<-l.closeGate
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed == "" {
		l.closed = reason
	}
}

// register replaces the link's roster; the broker's announce stands for
// the "registered" frame and is recorded as one.
func (l *fakeLink) register(names ...string) {
	l.t.Helper()
	regs := make([]wire.Registration, len(names))
	for i, n := range names {
		regs[i] = wire.Registration{Name: n}
	}
	l.registerAs(regs...)
}

// registerAs is register with whole registrations.
func (l *fakeLink) registerAs(regs ...wire.Registration) {
	l.t.Helper()
	err := l.h.b.Register(context.Background(), l, regs, "", func(names []string) {
		f, _ := wire.Marshal(wire.Registered{Type: wire.TypeRegistered, Names: names})
		_ = l.Send(f)
	})
	if err != nil {
		l.t.Fatal(err)
	}
	l.expect(wire.TypeRegistered)
}

// next waits for the next frame the broker sent on this link.
func (l *fakeLink) next() (string, []byte) {
	l.t.Helper()
	deadline := time.Now().Add(guard)
	for {
		l.mu.Lock()
		if l.read < len(l.frames) {
			f := l.frames[l.read]
			l.read++
			l.mu.Unlock()
			typ, _ := wire.PeekType(f)
			return typ, f
		}
		l.mu.Unlock()
		if time.Now().After(deadline) {
			l.t.Fatal("no frame arrived")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func (l *fakeLink) expect(typ string) []byte {
	l.t.Helper()
	got, f := l.next()
	if got != typ {
		l.t.Fatalf("frame %s, want %s: %s", got, typ, f)
	}
	return f
}

// offer waits for a run frame and returns the run it offers.
func (l *fakeLink) offer() string {
	l.t.Helper()
	var f wire.RunFrame
	if err := json.Unmarshal(l.expect(wire.TypeRun), &f); err != nil {
		l.t.Fatal(err)
	}
	return f.RunID
}

// none claims the broker sent nothing more on this link. The barrier is
// the broker settled: every lane has handled its queue, and a lane's
// frame is recorded before its Send returns. The caller must first have
// waited for the effect of whatever clock it advanced.
func (l *fakeLink) none() {
	l.t.Helper()
	l.h.settle()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.read < len(l.frames) {
		l.t.Fatalf("unexpected frame: %s", l.frames[l.read])
	}
}

// takes waits for the offer of runID, accepts it and waits for it to run.
func (l *fakeLink) takes(runID string) {
	l.t.Helper()
	if got := l.offer(); got != runID {
		l.t.Fatalf("offered %s, want %s", got, runID)
	}
	l.accept(runID)
	l.h.waitStatus(runID, run.Running)
}

func (l *fakeLink) accept(runID string) { l.h.b.Ack(l, runID, wire.Accepted, "") }
func (l *fakeLink) decline(runID string) {
	l.h.b.Ack(l, runID, wire.Declined, "")
}
func (l *fakeLink) refuse(runID, reason string) { l.h.b.Ack(l, runID, wire.Refused, reason) }
func (l *fakeLink) event(runID, ev string)      { l.h.b.Event(l, runID, json.RawMessage(ev), nil) }
func (l *fakeLink) finish(runID string)         { l.h.b.Finish(l, runID) }

// lost detaches the link as a transport failure (no close frame);
// goodbye as a provider leaving on purpose.
func (l *fakeLink) lost()    { l.h.b.Detach(l, true) }
func (l *fakeLink) goodbye() { l.h.b.Detach(l, false) }

func started(runID, threadID string) string {
	return fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, threadID, runID)
}

// answer streams the rest of a short successful answer and finishes.
func (l *fakeLink) answer(runID, threadID string) {
	l.event(runID, `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`)
	l.event(runID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hello"}`)
	l.event(runID, `{"type":"TEXT_MESSAGE_END","messageId":"m1"}`)
	l.event(runID, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, threadID, runID))
	l.finish(runID)
}

// complete streams a whole short answer: RUN_STARTED, a message, the end.
func (l *fakeLink) complete(runID, threadID string) {
	l.event(runID, started(runID, threadID))
	l.answer(runID, threadID)
}

func limit(n int) *int { return &n }
