// Package nodetest runs a real broker node for tests — a fresh PostgreSQL
// database, a Redis prefix of its own, a fake clock for the broker's waits,
// and loopback HTTP — and scripts providers that speak the real wire. It is
// for tests only.
package nodetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/broker-node/node"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/redistest"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/runinput"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/store/storetest"
	"github.com/funduq/funduq-go/core/wire"
)

// guard bounds every wait in these tests. It is a hang detector, never a
// timing assertion: a healthy run takes milliseconds, but a heavy step (a
// link flooded with thousands of queries) on a loaded machine can take tens
// of seconds, and a passing test never waits it out.
const guard = time.Minute

type Harness struct {
	t     testing.TB
	Node  *node.Node
	URL   string
	Clock *Clock
	Store *store.Store
	stop  context.CancelFunc
	done  chan error
	Cfg   config.Broker
	// Prefix is the Redis key prefix this harness's nodes share.
	Prefix string
	// Log is where the node logs (FUNDUQ_TEST_LOG), for a test's own
	// processes (a provider) to log beside it.
	Log *slog.Logger
	db  *pgx.Conn // the test's own connection (DB)
}

// TokenSecret is the harness's FUNDUQ_TOKEN_SECRET: long enough for the
// configuration's minimum (config.MinTokenSecret), as the doors and
// processes a test starts from it parse it.
const TokenSecret = "nodetest-token-secret-0123456789abcdef"

// SeedHex is a test seed: b repeated 32 times, in hex.
func SeedHex(b byte) string { return strings.Repeat(fmt.Sprintf("%02x", b), 32) }

// testLogger is the node's logger: none, unless FUNDUQ_TEST_LOG is set —
// to "onfail", a file per node kept (and named in the test's output) only
// when the test fails, for the rare failure of a loaded machine whose
// cause is in the log; to anything else, stderr.
func testLogger(t testing.TB) *slog.Logger {
	switch os.Getenv("FUNDUQ_TEST_LOG") {
	case "":
		return slog.New(slog.DiscardHandler)
	case "onfail":
		f, err := os.CreateTemp("", "funduq-node-*.log")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			f.Close()
			if t.Failed() {
				t.Logf("node log kept at %s", f.Name())
			} else {
				os.Remove(f.Name())
			}
		})
		return slog.New(slog.NewJSONHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// Start runs a broker node on a fresh database, a fake clock and loopback.
func Start(t testing.TB, mut func(*config.Broker)) *Harness {
	t.Helper()
	return StartWith(t, mut, nil)
}

// StartWith is Start with the node's options adjusted by opts.
func StartWith(t testing.TB, mut func(*config.Broker), opts func(*node.Options)) *Harness {
	t.Helper()
	dbURL := storetest.URL(t)
	_, prefix := redistest.Client(t)
	return StartOn(t, dbURL, redistest.URL(), prefix, mut, opts)
}

// StartOn is StartWith on the given (migrated) database and Redis, with
// the Redis key prefix prefix — for tests that bring their own servers
// (internal/testservers) to take them away.
func StartOn(t testing.TB, dbURL, redisURL, prefix string, mut func(*config.Broker), opts func(*node.Options)) *Harness {
	t.Helper()
	cfg := config.Broker{
		Storage:  config.Storage{DatabaseURL: dbURL, RedisURL: redisURL},
		Identity: config.Identity{IdentityKey: SeedHex(0xb6), TokenSecret: TokenSecret},
		Waits: config.Waits{LeaseTTL: 10 * time.Second, DeliverTimeout: 5 * time.Second, UnservedTimeout: 45 * time.Second,
			UndeliveredWindow: 1800 * time.Second, ProviderGrace: 0, ProviderQualityTolerance: 3, RegisterDeadline: 30 * time.Second},
		NodeID: "test-node",
	}
	if mut != nil {
		mut(&cfg)
	}
	h := startNode(t, cfg, prefix, opts)
	h.Eventually("the node leads", h.Ready)
	return h
}

func startNode(t testing.TB, cfg config.Broker, prefix string, opts func(*node.Options)) *Harness {
	t.Helper()
	clock := newClock(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	direct := "http://" + ln.Addr().String()
	if cfg.AdvertiseURL == "" {
		cfg.AdvertiseURL = direct
	}
	ctx, cancel := context.WithCancel(context.Background())
	log := testLogger(t)
	o := node.Options{Logger: log.With("test_node", cfg.NodeID), Clock: clock, RedisPrefix: prefix}
	if opts != nil {
		opts(&o)
	}
	n, err := node.New(ctx, cfg, o)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	n.IntakePoll = 200 * time.Millisecond
	h := &Harness{t: t, Node: n, URL: direct, Clock: clock, Store: n.Store(), stop: cancel, Log: log,
		done: make(chan error, 1), Cfg: cfg, Prefix: prefix}
	go func() { h.done <- n.Run(ctx, ln) }()
	t.Cleanup(h.Shutdown)
	return h
}

// Peer starts another broker node on the same database and Redis prefix —
// a standby while this one leads. It shares nothing else with h.
func (h *Harness) Peer(nodeID string) *Harness {
	h.t.Helper()
	return h.PeerWith(nodeID, nil, nil)
}

// PeerWith is Peer with the peer's configuration adjusted by mut (and its
// options by opts): its own
// store URLs (through a proxy the test can cut), its own advertised URL.
// URL stays the node's own listener; an AdvertiseURL left empty is that too.
func (h *Harness) PeerWith(nodeID string, mut func(*config.Broker), opts func(*node.Options)) *Harness {
	h.t.Helper()
	cfg := h.Cfg
	cfg.NodeID = nodeID
	cfg.AdvertiseURL = ""
	if mut != nil {
		mut(&cfg)
	}
	return startNode(h.t, cfg, h.Prefix, opts)
}

// Ready reports whether this node's /readyz answers 200 (it leads).
func (h *Harness) Ready() bool {
	resp, err := http.Get(h.URL + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == 200
}

func (h *Harness) Shutdown() {
	if h.stop == nil {
		return
	}
	h.stop()
	h.stop = nil
	select {
	case err := <-h.done:
		if err != nil {
			h.t.Errorf("node: %v", err)
		}
	case <-time.After(guard):
		h.t.Error("node did not stop")
	}
	h.Node.Close()
}

func (h *Harness) Eventually(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(guard)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// EventuallyExplained is Eventually, with explain's account of the state
// (the run row, the lane) in the failure: a wait that gives up on a
// loaded machine is rare and cannot be rerun at will.
func (h *Harness) EventuallyExplained(what string, cond func() bool, explain func() string) {
	h.t.Helper()
	deadline := time.Now().Add(guard)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("gave up waiting: %s; %s", what, explain())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// DescribeRun is the run's row, its stored events and its lane as the
// broker holds it, in one line, for a failure's message.
func (h *Harness) DescribeRun(id string) string {
	h.t.Helper()
	r := h.Run(id)
	var types []string
	for _, e := range h.Events(id) {
		types = append(types, fmt.Sprint(e["type"]))
	}
	lane, ok := h.Node.Broker.Snapshot().Lanes[id]
	laneSays := "no lane"
	if ok {
		laneSays = "lane " + string(lane)
	}
	return fmt.Sprintf("run %s is %s (%s), owner epoch %d, last seq %d, round seq %d, queued at %s; %d events stored %v; %s",
		id, r.Status, r.FailureReason, r.OwnerEpoch, r.LastSeq, r.RoundSeq, r.QueuedAt.Format(time.RFC3339Nano),
		len(types), types, laneSays+"; "+h.Node.Broker.DescribeLane(id))
}

// Settle waits until every timer callback whose time has come has run and
// every lane has handled everything in its queue (a callback tells a lane
// before it counts as run, so the order of the two reads matters).
func (h *Harness) Settle() {
	h.t.Helper()
	h.Eventually("the broker settles", func() bool { return !h.Clock.firing() && h.Node.Broker.Idle() })
}

// taken waits until the broker has taken run id into a lane.
func (h *Harness) Taken(id string) {
	h.t.Helper()
	h.Eventually("run "+id+" taken into a lane", func() bool {
		_, ok := h.Node.Broker.Snapshot().Lanes[id]
		return ok
	})
	h.Settle()
}

// Advance moves the fake clock and lets the sweep and lanes act on it.
//
// It settles first: a lane arms its timers as a duration from a clock
// read (a re-attached run's hold, design.md D5, runs to the re-attach
// plus the link grace), and a clock moved between that read and the
// arming would set the timer as far late as the clock moved — a wait the
// test's later Advance never reaches. Only a lane that has handled what
// it was told (a register's re-attach is queued before "registered" is
// written) reads the clock before it moves.
func (h *Harness) Advance(d time.Duration) {
	h.t.Helper()
	h.Settle()
	h.Clock.Advance(d)
	h.Settle()
}

func (h *Harness) Run(id string) store.Run {
	h.t.Helper()
	var r store.Run
	h.read("run "+id, func() (err error) { r, err = h.Store.GetRun(context.Background(), id); return err })
	return r
}

// read runs a test's read, retrying while the database is briefly away (a
// test that kills connections kills the harness's idle ones too).
func (h *Harness) read(what string, fn func() error) {
	h.t.Helper()
	deadline := time.Now().Add(guard)
	for {
		err := fn()
		if err == nil {
			return
		}
		if errors.Is(err, store.ErrNotFound) || time.Now().After(deadline) {
			h.t.Fatalf("read %s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (h *Harness) WaitStatus(id string, want run.Status) store.Run {
	h.t.Helper()
	var r store.Run
	h.Eventually(fmt.Sprintf("run %s reaches %s", id, want), func() bool {
		r = h.Run(id)
		return r.Status == want
	})
	return r
}

func (h *Harness) Events(id string) []map[string]any {
	h.t.Helper()
	var evs []store.Event
	h.read("events of "+id, func() (err error) { evs, err = h.Store.EventsAfter(context.Background(), id, 0, 1000); return err })
	out := make([]map[string]any, len(evs))
	for i, e := range evs {
		_ = json.Unmarshal(e.Event, &out[i])
	}
	return out
}

func (h *Harness) Quality(key string) store.Quality {
	h.t.Helper()
	q, err := h.Store.GetQuality(context.Background(), key)
	if err != nil {
		h.t.Fatal(err)
	}
	return q
}

// door inserts a run the way a door does: the one input builder, one
// transaction with the thread, the run, its message and the NOTIFY.
func (h *Harness) Door(key, agent, threadID, text string) (runID, thread string) {
	h.t.Helper()
	runID = run.NewRunID()
	create := threadID == ""
	if create {
		threadID = run.NewThreadID()
	}
	b, err := runinput.Build(runinput.Request{ThreadID: threadID, RunID: runID,
		Messages: []json.RawMessage{json.RawMessage(fmt.Sprintf(`{"id":"c1","role":"user","content":%q}`, text))}})
	if err != nil {
		h.t.Fatal(err)
	}
	nr := store.NewRun{RunID: runID, ThreadID: threadID, ProviderKey: key, AgentName: agent, RunInput: b.Bytes}
	if create {
		nr.CreateThread = &store.NewThread{}
	}
	for i, id := range b.MessageIDs {
		nr.Messages = append(nr.Messages, store.Message{MessageID: id, Message: b.Input.Messages[i]})
	}
	if _, _, err := h.Store.CreateRun(context.Background(), nr); err != nil {
		h.t.Fatal(err)
	}
	return runID, threadID
}

// CompletedRun starts a run of p's agent on a new thread at the door and
// plays it through: the offer, the accept, the echo reply, the finish,
// until the record says completed.
func (h *Harness) CompletedRun(p *Prov, agent, text string) (runID, thread string, r store.Run) {
	h.t.Helper()
	runID, thread = h.Door(p.Key, agent, "", text)
	p.Offer()
	p.Accept(runID)
	p.Complete(runID, thread)
	return runID, thread, h.WaitStatus(runID, run.Completed)
}

// prov is a provider speaking the real wire, scripted by the test.
type Prov struct {
	t      testing.TB
	h      *Harness
	signer *identity.Signer
	Key    string
	ws     *websocket.Conn
	frames chan []byte
	wmu    sync.Mutex
	closed chan struct{}
	closeE error
	// barrier numbers None's queries.
	barrier int
	// holdClose, while set, keeps the reader from answering funduq's close
	// frame until it is closed (HoldCloseReply).
	hmu       sync.Mutex
	holdClose chan struct{}
	closeSeen chan struct{}
}

// Limit is a maxConcurrentRuns declaration.
func Limit(n int) *int { return &n }

// connect admits a provider: ticket, hello, welcome (verified).
func (h *Harness) Connect(seed byte, max *int) *Prov {
	h.t.Helper()
	s, err := identity.NewSignerFromSeedHex(SeedHex(seed))
	if err != nil {
		h.t.Fatal(err)
	}
	p := &Prov{t: h.t, h: h, signer: s, Key: s.PublicKeyHex(), frames: make(chan []byte, 1024), closed: make(chan struct{})}
	resp, err := http.Post(h.URL+"/tickets", "application/json", strings.NewReader(`{"publicKey":"`+p.Key+`"}`))
	if err != nil {
		h.t.Fatal(err)
	}
	var tr wire.TicketResponse
	_ = json.NewDecoder(resp.Body).Decode(&tr)
	resp.Body.Close()
	if resp.StatusCode != 201 || tr.FunduqPublicKey != h.Node.FunduqKey() {
		h.t.Fatalf("tickets: %d %+v", resp.StatusCode, tr)
	}
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(h.URL, "http")+"/ws/provider", nil)
	if err != nil {
		h.t.Fatal(err)
	}
	p.ws = ws
	ws.SetCloseHandler(p.onClose)
	nonce := fmt.Sprintf("%032x", time.Now().UnixNano())
	v := wire.Version
	p.Send(wire.Hello{Type: wire.TypeHello, Version: &v, PublicKey: p.Key, Ticket: tr.Ticket, Nonce: nonce,
		Proof: s.Sign(identity.ProviderConnectPayload(tr.FunduqPublicKey, tr.Ticket, nonce)), MaxConcurrentRuns: max})
	go p.read()
	var w wire.Welcome
	p.Expect(wire.TypeWelcome, &w)
	pub, _ := identity.ParsePublicKey(w.FunduqPublicKey)
	if err := identity.Verify(pub, identity.FunduqConnectPayload(tr.Ticket, nonce), w.Answer); err != nil {
		h.t.Fatalf("welcome answer: %v", err)
	}
	h.t.Cleanup(p.Close)
	return p
}

func (p *Prov) read() {
	defer close(p.closed)
	for {
		_, data, err := p.ws.ReadMessage()
		if err != nil {
			p.closeE = err
			return
		}
		p.frames <- data
	}
}

// onClose answers funduq's close frame as gorilla's default handler does,
// once HoldCloseReply lets it.
func (p *Prov) onClose(code int, _ string) error {
	p.hmu.Lock()
	hold, seen := p.holdClose, p.closeSeen
	p.hmu.Unlock()
	if hold != nil {
		close(seen)
		<-hold
	}
	if code == websocket.CloseNoStatusReceived {
		code = websocket.CloseNormalClosure
	}
	p.wmu.Lock()
	defer p.wmu.Unlock()
	_ = p.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, ""), time.Now().Add(time.Second))
	return nil
}

// HoldCloseReply keeps p from answering funduq's close frame until release
// is called (it is at the test's end); seen is closed when the close frame
// has arrived. Meanwhile p may still write: a provider whose writer goes on
// while its reader takes in the close, as a WebSocket peer may until it
// sends its own close frame (RFC 6455 §5.5.1).
func (p *Prov) HoldCloseReply() (seen <-chan struct{}, release func()) {
	hold, arrived := make(chan struct{}), make(chan struct{})
	p.hmu.Lock()
	p.holdClose, p.closeSeen = hold, arrived
	p.hmu.Unlock()
	var once sync.Once
	release = func() { once.Do(func() { close(hold) }) }
	p.t.Cleanup(release)
	return arrived, release
}

func (p *Prov) Send(v any) {
	p.t.Helper()
	b, _ := json.Marshal(v)
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if err := p.ws.WriteMessage(websocket.TextMessage, b); err != nil {
		p.t.Logf("send: %v", err)
	}
}

// SendRaw writes frame as it is.
func (p *Prov) SendRaw(frame string) {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	_ = p.ws.WriteMessage(websocket.TextMessage, []byte(frame))
}

// Close drops the connection without a close frame: to the broker, a link
// lost (a transport failure), not a goodbye.
func (p *Prov) Close() { _ = p.ws.Close(); <-p.closed }

// Goodbye closes the link as a provider leaving on purpose: a close frame,
// then the connection.
func (p *Prov) Goodbye() {
	p.wmu.Lock()
	_ = p.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "bye"), time.Now().Add(time.Second))
	p.wmu.Unlock()
	p.Close()
}

// Closed reports whether the link has closed, and with what (a
// *websocket.CloseError carries funduq's close code and reason).
func (p *Prov) Closed() (bool, error) {
	select {
	case <-p.closed:
		return true, p.closeE
	default:
		return false, nil
	}
}

// next returns the next frame.
func (p *Prov) Next() (string, []byte) {
	p.t.Helper()
	select {
	case f := <-p.frames:
		typ, _ := wire.PeekType(f)
		return typ, f
	case <-p.closed:
		select {
		case f := <-p.frames:
			typ, _ := wire.PeekType(f)
			return typ, f
		default:
		}
		p.t.Fatalf("link closed while waiting for a frame: %v", p.closeE)
	case <-time.After(guard):
		p.t.Fatal("no frame arrived")
	}
	return "", nil
}

// Rest returns every frame still to come, in order, once the link has
// closed: the closing is the barrier that nothing more arrives.
func (p *Prov) Rest() [][]byte {
	p.t.Helper()
	var out [][]byte
	for {
		select {
		case f := <-p.frames:
			out = append(out, f)
			continue
		case <-p.closed:
		case <-time.After(guard):
			p.t.Fatal("the link did not close")
		}
		for {
			select {
			case f := <-p.frames:
				out = append(out, f)
			default:
				return out
			}
		}
	}
}

func (p *Prov) Expect(typ string, into any) []byte {
	p.t.Helper()
	got, f := p.Next()
	if got != typ {
		p.t.Fatalf("frame %s, want %s: %s", got, typ, f)
	}
	if into != nil {
		if err := json.Unmarshal(f, into); err != nil {
			p.t.Fatal(err)
		}
	}
	return f
}

// None asserts that the broker, once settled, has sent this provider
// nothing. A frame can be written by the broker and still be in flight, so
// a look at what has arrived proves nothing; None ends with a barrier
// instead: a query the broker answers on the same ordered link, after
// everything it wrote before it read the query. Any frame before the
// answer is unexpected.
func (p *Prov) None() {
	p.t.Helper()
	p.h.Settle()
	if got := p.Barrier(); len(got) > 0 {
		p.t.Fatalf("unexpected frame: %s", got[0])
	}
}

// Barrier returns the frames the broker sent p before it answered a query
// p sends now: the answer comes once every event p sent before the query
// is stored or refused (design.md §The provider wire), after everything
// the broker wrote before it read the query.
func (p *Prov) Barrier() [][]byte {
	p.t.Helper()
	p.barrier++
	id := fmt.Sprintf("nodetest-barrier-%d", p.barrier)
	p.Send(wire.Query{Type: wire.TypeQuery, QueryID: id, Method: "nodetest.barrier", Params: json.RawMessage(`{}`)})
	var before [][]byte
	for {
		typ, f := p.Next()
		var r wire.QueryResult
		if typ == wire.TypeQueryResult && json.Unmarshal(f, &r) == nil && r.QueryID == id {
			return before
		}
		before = append(before, f)
	}
}

// ReadBarrier returns once the broker's read loop has handed on every
// frame p sent before it: a deleteAgent of a name p never registered,
// answered on the read loop itself (a query waits for the events before
// it to be stored; this does not). Frames before its answer are returned.
func (p *Prov) ReadBarrier() [][]byte {
	p.t.Helper()
	p.barrier++
	name := fmt.Sprintf("nodetest-read-barrier-%d", p.barrier)
	p.Send(wire.DeleteAgent{Type: wire.TypeDeleteAgent, Name: name})
	var before [][]byte
	for {
		typ, f := p.Next()
		var e wire.Error
		if typ == wire.TypeError && json.Unmarshal(f, &e) == nil && e.Name == name {
			return before
		}
		before = append(before, f)
	}
}

// DeclineOffers answers every offer that reaches p before a barrier (a
// query, as None's) with a decline, as a process with no room does, and
// returns their run ids. When it declined any it sends a second barrier, so
// that the broker has read every decline when it returns (its lanes may
// still be acting on them: Settle).
func (p *Prov) DeclineOffers() []string {
	p.t.Helper()
	var declined []string
	for {
		p.barrier++
		id := fmt.Sprintf("nodetest-barrier-%d", p.barrier)
		p.Send(wire.Query{Type: wire.TypeQuery, QueryID: id, Method: "nodetest.barrier", Params: json.RawMessage(`{}`)})
		n := len(declined)
		for {
			typ, f := p.Next()
			if typ == wire.TypeRun {
				var r wire.RunFrame
				_ = json.Unmarshal(f, &r)
				p.Decline(r.RunID)
				declined = append(declined, r.RunID)
				continue
			}
			var r wire.QueryResult
			if typ != wire.TypeQueryResult || json.Unmarshal(f, &r) != nil || r.QueryID != id {
				p.t.Fatalf("unexpected frame: %s", f)
			}
			break
		}
		if len(declined) == n {
			return declined
		}
	}
}

func (p *Prov) Register(names ...string) {
	p.t.Helper()
	var regs []wire.Registration
	for _, n := range names {
		regs = append(regs, wire.Registration{Name: n})
	}
	p.Send(wire.Register{Type: wire.TypeRegister, Agents: regs})
	var r wire.Registered
	p.Expect(wire.TypeRegistered, &r)
}

// offer waits for a run frame and returns it.
func (p *Prov) Offer() wire.RunFrame {
	p.t.Helper()
	var f wire.RunFrame
	p.Expect(wire.TypeRun, &f)
	return f
}

func boolp(b bool) *bool { return &b }

func (p *Prov) Accept(runID string) { p.Send(wire.Ack{Type: wire.TypeAck, RunID: runID}) }
func (p *Prov) Decline(runID string) {
	p.Send(wire.Ack{Type: wire.TypeAck, RunID: runID, Accepted: boolp(false)})
}
func (p *Prov) Refuse(runID, reason string) {
	p.Send(wire.Ack{Type: wire.TypeAck, RunID: runID, Accepted: boolp(false), Reason: &reason})
}
func (p *Prov) Event(runID string, ev string) {
	p.Send(wire.Event{Type: wire.TypeEvent, RunID: runID, Event: json.RawMessage(ev)})
}
func (p *Prov) Finish(runID string) { p.Send(wire.Finish{Type: wire.TypeFinish, RunID: runID}) }

// complete streams a short successful answer and finishes.
func (p *Prov) Complete(runID, threadID string) {
	p.Event(runID, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, threadID, runID))
	p.Event(runID, `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`)
	p.Event(runID, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hello"}`)
	p.Event(runID, `{"type":"TEXT_MESSAGE_END","messageId":"m1"}`)
	p.Event(runID, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, threadID, runID))
	p.Finish(runID)
}

// Hold runs sql (a SELECT … FOR UPDATE, a LOCK TABLE) in a transaction of
// its own on the harness's database and keeps the locks it took until
// release is called or the test ends: the node's next write that needs
// them waits meanwhile, as it would behind a slow or stuck PostgreSQL.
func (h *Harness) Hold(sql string, args ...any) (release func()) {
	h.t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, h.Cfg.DatabaseURL)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { conn.Close(ctx) })
	tx, err := conn.Begin(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, sql, args...); err != nil {
		h.t.Fatal(err)
	}
	var once sync.Once
	release = func() {
		h.t.Helper()
		once.Do(func() {
			if err := tx.Rollback(ctx); err != nil {
				h.t.Fatalf("release the held locks: %v", err)
			}
		})
	}
	h.t.Cleanup(func() { once.Do(func() { _ = tx.Rollback(ctx) }) })
	return release
}

// DB is a connection of the test's own to the harness's database, for reads
// beside the node's; unlike Store it outlives Shutdown. It is not safe for
// concurrent use.
func (h *Harness) DB() *pgx.Conn {
	h.t.Helper()
	if h.db == nil {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, h.Cfg.DatabaseURL)
		if err != nil {
			h.t.Fatal(err)
		}
		h.t.Cleanup(func() { conn.Close(ctx) })
		h.db = conn
	}
	return h.db
}

// HangUpWhileLocked posts body to url as a caller that hangs up once
// the request waits on a lock in the harness's database (one Hold keeps),
// and returns the request's path when the client has given up: a caller
// leaving while the door waits in PostgreSQL.
func (h *Harness) HangUpWhileLocked(url, body string) (path string) {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	h.Eventually("the request waits on a lock", h.LockWaits)
	cancel()
	<-done
	return req.URL.Path
}

// LockWaits reports whether a backend of the harness's database is waiting
// on a lock (one that Hold keeps, say).
func (h *Harness) LockWaits() bool {
	h.t.Helper()
	var waiting bool
	err := h.DB().QueryRow(context.Background(), `SELECT count(*) > 0 FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting)
	return err == nil && waiting
}

// LockWaitsOn reports whether a backend of the harness's database waits
// on a lock that a holder of a lock on table has: a wait behind Hold of
// that table's rows, not a stale one behind an earlier Hold just released
// (the waiter may still show wait_event_type Lock for a moment).
func (h *Harness) LockWaitsOn(table string) func() bool {
	return func() bool {
		h.t.Helper()
		var waiting bool
		err := h.DB().QueryRow(context.Background(), `SELECT count(*) > 0 FROM pg_stat_activity a
			WHERE a.datname = current_database() AND a.wait_event_type = 'Lock'
			AND EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid = ANY(pg_blocking_pids(a.pid))
				AND l.granted AND l.relation = $1::regclass)`, table).Scan(&waiting)
		return err == nil && waiting
	}
}

// DoorApp is the application_name a door's PostgreSQL connections carry
// (functions/door.Connect).
const DoorApp = "funduq-door"

// KillBackends terminates every backend of the harness's database whose
// application_name is app, busy or idle in its pool — what a database
// failover or an operator's kill does to them — and returns how many.
func (h *Harness) KillBackends(app string) int {
	h.t.Helper()
	var n int
	if err := h.DB().QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = $1 AND datname = current_database()`, app).Scan(&n); err != nil {
		h.t.Fatal(err)
	}
	return n
}

// Outage makes the harness's database unreachable for the connections
// named app (KillBackends) while the others keep the connections they
// hold: new connections are refused and app's are terminated. end lets
// connections in again (the test's end does too).
func (h *Harness) Outage(app string) (end func()) {
	h.t.Helper()
	ctx := context.Background()
	var db string
	if err := h.DB().QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		h.t.Fatal(err)
	}
	// A database's connections are switched off from another one.
	admin, err := pgx.Connect(ctx, storetest.AdminURL())
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { admin.Close(ctx) })
	allow := func(on bool) {
		h.t.Helper()
		if _, err := admin.Exec(ctx, fmt.Sprintf(`ALTER DATABASE %s ALLOW_CONNECTIONS %t`, pgx.Identifier{db}.Sanitize(), on)); err != nil {
			h.t.Fatal(err)
		}
	}
	allow(false)
	var once sync.Once
	end = func() { once.Do(func() { allow(true) }) }
	h.t.Cleanup(end)
	h.Eventually("the backends are gone", func() bool { return h.KillBackends(app) == 0 })
	return end
}

// RedisURLNamed is the harness's Redis URL for clients that name
// themselves name (CLIENT SETNAME), so KillRedisClients finds them and
// nobody else's.
func (h *Harness) RedisURLNamed(name string) string {
	h.t.Helper()
	u, err := url.Parse(h.Cfg.RedisURL)
	if err != nil {
		h.t.Fatal(err)
	}
	q := u.Query()
	q.Set("client_name", name)
	u.RawQuery = q.Encode()
	return u.String()
}

// KillRedisClients kills the connections to the harness's Redis of the
// clients named name (CLIENT KILL has no filter by name) and returns how
// many went.
func (h *Harness) KillRedisClients(name string) int {
	h.t.Helper()
	opt, err := redis.ParseURL(h.Cfg.RedisURL)
	if err != nil {
		h.t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	ctx := context.Background()
	list, err := rdb.ClientList(ctx).Result()
	if err != nil {
		h.t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(list, "\n") {
		fields := map[string]string{}
		for _, f := range strings.Fields(line) {
			k, v, _ := strings.Cut(f, "=")
			fields[k] = v
		}
		if fields["name"] != name || fields["id"] == "" {
			continue
		}
		if rdb.ClientKillByFilter(ctx, "ID", fields["id"]).Err() == nil {
			n++
		}
	}
	return n
}
