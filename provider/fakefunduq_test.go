package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/wire"
)

// guard bounds every wait in these tests. It is never an assertion about
// timing: a test only hits it when something that must happen did not.
const guard = 10 * time.Second

const (
	funduqSeedHex   = "11111111111111111111111111111111111111111111111111111111111111a1"
	providerSeedHex = "22222222222222222222222222222222222222222222222222222222222222b2"
	strangerSeedHex = "33333333333333333333333333333333333333333333333333333333333333c3"
)

func mustSigner(t testing.TB, seedHex string) *identity.Signer {
	t.Helper()
	s, err := identity.NewSignerFromSeedHex(seedHex)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// fakeFunduq is a scripted broker node speaking the real provider wire:
// POST /tickets issues single-use tickets bound to a key, and /ws/provider
// performs funduq's side of the handshake with a real identity.Signer before
// handing each registered link to the test as a peer.
type fakeFunduq struct {
	t        *testing.T
	signer   *identity.Signer
	srv      *httptest.Server
	upgrader websocket.Upgrader

	ticketSeen chan int   // the ordinal of every POST /tickets
	peers      chan *peer // every upgraded link, once its handshake script ran

	mu       sync.Mutex
	tickets  map[string]string // ticket → key it was issued to
	nTickets int
	nConns   int
	all      []*peer
	// Scripting hooks (nil = behave like funduq). n is 1-based.
	onTicket      func(n int, w http.ResponseWriter, r *http.Request) bool
	onUpgrade     func(w http.ResponseWriter, r *http.Request) bool
	welcome       func(n int, w *wire.Welcome)
	afterRegister func(n int, p *peer) bool // true: it answered register itself
	// readFailed runs when reading link n fails, before the fake closes
	// it: a hook that blocks keeps the connection open, unread.
	readFailed func(n int, p *peer, err error)
	// passDeletes hands deleteAgent frames to the test; otherwise the fake
	// answers each with deleted, as funduq does, and the test never sees it.
	passDeletes bool
	// answerSyncs answers the client's sync queries (sync.go) at once;
	// otherwise the fake drops them unanswered, so no finish is confirmed
	// and every test that does not ask sees the link as before. Either
	// way the test never sees them. synced counts the answers per link.
	answerSyncs bool

	wg sync.WaitGroup
}

func newFakeFunduq(t *testing.T) *fakeFunduq {
	t.Helper()
	f := &fakeFunduq{
		t:          t,
		signer:     mustSigner(t, funduqSeedHex),
		ticketSeen: make(chan int, 1000),
		peers:      make(chan *peer, 100),
		tickets:    make(map[string]string),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /tickets", f.handleTicket)
	mux.HandleFunc("GET /ws/provider", f.handleLink)
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.close)
	return f
}

func (f *fakeFunduq) url() string { return f.srv.URL }

func (f *fakeFunduq) key() string { return f.signer.PublicKeyHex() }

func (f *fakeFunduq) setHooks(fn func(f *fakeFunduq)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func (f *fakeFunduq) close() {
	f.mu.Lock()
	peers := append([]*peer(nil), f.all...)
	f.mu.Unlock()
	for _, p := range peers {
		p.conn.Close()
	}
	f.wg.Wait()
	f.srv.Close()
}

func (f *fakeFunduq) conns() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.nConns
}

func (f *fakeFunduq) handleTicket(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.nTickets++
	n := f.nTickets
	hook := f.onTicket
	f.mu.Unlock()
	select {
	case f.ticketSeen <- n:
	default:
	}
	if hook != nil && hook(n, w, r) {
		return
	}
	var req wire.TicketRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.PublicKey == "" {
		http.Error(w, `{"detail":"publicKey required"}`, http.StatusUnprocessableEntity)
		return
	}
	ticket := randomHex(16)
	f.mu.Lock()
	f.tickets[ticket] = req.PublicKey
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(wire.TicketResponse{Ticket: ticket, FunduqPublicKey: f.key()})
}

// claim spends a ticket issued to key (a ticket presented by another key is
// not spent).
func (f *fakeFunduq) claim(ticket, key string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	owner, ok := f.tickets[ticket]
	if !ok || owner != key {
		return false
	}
	delete(f.tickets, ticket)
	return true
}

// peer is funduq's end of one link.
type peer struct {
	n        int
	conn     *websocket.Conn
	hello    wire.Hello
	register *wire.Register // nil if the client never sent one
	regRaw   []byte
	early    [][]byte    // frames the client sent before its register (resent paused rounds)
	err      error       // why the handshake script stopped, if it did
	frames   chan []byte // frames after the handshake, closed at EOF
	synced   atomic.Int64
	wmu      sync.Mutex
}

func (f *fakeFunduq) handleLink(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	hook := f.onUpgrade
	f.mu.Unlock()
	if hook != nil && hook(w, r) {
		return
	}
	conn, err := f.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	f.mu.Lock()
	f.nConns++
	p := &peer{n: f.nConns, conn: conn, frames: make(chan []byte, 4096)}
	f.all = append(f.all, p)
	welcomeHook, registerHook, readFailed := f.welcome, f.afterRegister, f.readFailed
	f.wg.Add(1)
	f.mu.Unlock()
	defer f.wg.Done()
	defer conn.Close()
	defer close(p.frames)

	p.err = f.serverHandshake(p, welcomeHook, registerHook)
	f.peers <- p
	if p.err != nil {
		// Keep reading so the test sees what the client does next.
		_ = conn.SetReadDeadline(time.Now().Add(guard))
	}
	for {
		mt, raw, err := conn.ReadMessage()
		if err != nil {
			if readFailed != nil {
				readFailed(p.n, p, err)
			}
			return
		}
		if mt != websocket.TextMessage {
			continue
		}
		var q wire.Query
		if typ, _ := wire.PeekType(raw); typ == wire.TypeQuery && json.Unmarshal(raw, &q) == nil && q.Method == syncMethod {
			f.mu.Lock()
			answer := f.answerSyncs
			f.mu.Unlock()
			if answer {
				// Counted before it is sent: the client may act on the
				// answer (confirm a finish) before this goroutine runs on.
				p.synced.Add(1)
				_ = p.write(wire.QueryResult{Type: wire.TypeQueryResult, QueryID: q.QueryID, Error: "unknown query method"})
			}
			continue
		}
		if typ, _ := wire.PeekType(raw); typ == wire.TypeDeleteAgent {
			f.mu.Lock()
			pass := f.passDeletes
			f.mu.Unlock()
			if !pass {
				var d wire.DeleteAgent
				_ = json.Unmarshal(raw, &d)
				_ = p.write(wire.Deleted{Type: wire.TypeDeleted, Name: d.Name})
				continue
			}
		}
		p.frames <- raw
	}
}

// serverHandshake is funduq's side: hello (claim the ticket, verify the
// proof), welcome, then register → registered.
func (f *fakeFunduq) serverHandshake(p *peer, welcomeHook func(int, *wire.Welcome), registerHook func(int, *peer) bool) error {
	_ = p.conn.SetReadDeadline(time.Now().Add(guard))
	_, raw, err := p.conn.ReadMessage()
	if err != nil {
		return fmt.Errorf("no hello: %w", err)
	}
	if err := json.Unmarshal(raw, &p.hello); err != nil || p.hello.Type != wire.TypeHello {
		return p.closeWith("first frame must be hello")
	}
	if p.hello.Version == nil || *p.hello.Version != wire.Version {
		return p.closeWith("unsupported wire version")
	}
	if !f.claim(p.hello.Ticket, p.hello.PublicKey) {
		return p.closeWith("unknown ticket")
	}
	pub, err := identity.ParsePublicKey(p.hello.PublicKey)
	if err != nil {
		return p.closeWith("bad key")
	}
	if err := identity.Verify(pub, identity.ProviderConnectPayload(f.key(), p.hello.Ticket, p.hello.Nonce), p.hello.Proof); err != nil {
		return p.closeWith("proof does not verify")
	}
	w := wire.Welcome{
		Type:            wire.TypeWelcome,
		FunduqPublicKey: f.key(),
		Answer:          f.signer.Sign(identity.FunduqConnectPayload(p.hello.Ticket, p.hello.Nonce)),
	}
	if welcomeHook != nil {
		welcomeHook(p.n, &w)
	}
	if err := p.write(w); err != nil {
		return err
	}
	var reg wire.Register
	for {
		_, raw, err = p.conn.ReadMessage()
		if err != nil {
			return fmt.Errorf("no register: %w", err)
		}
		typ, _ := wire.PeekType(raw)
		if typ == wire.TypeEvent || typ == wire.TypeFinish {
			p.early = append(p.early, raw)
			continue
		}
		if err := json.Unmarshal(raw, &reg); err != nil || reg.Type != wire.TypeRegister {
			return fmt.Errorf("expected register, got %s", raw)
		}
		break
	}
	p.register = &reg
	p.regRaw = raw
	if registerHook != nil && registerHook(p.n, p) {
		return nil
	}
	names := make([]string, 0, len(reg.Agents))
	for _, a := range reg.Agents {
		names = append(names, a.Name)
	}
	if err := p.write(wire.Registered{Type: wire.TypeRegistered, Names: names}); err != nil {
		return err
	}
	_ = p.conn.SetReadDeadline(time.Time{})
	return nil
}

func (p *peer) closeWith(reason string) error {
	_ = p.conn.WriteControl(websocket.CloseMessage,
		websocket.FormatCloseMessage(websocket.ClosePolicyViolation, reason), time.Now().Add(time.Second))
	return errors.New(reason)
}

func (p *peer) write(v any) error {
	b, err := wire.Marshal(v)
	if err != nil {
		return err
	}
	return p.writeRaw(b)
}

func (p *peer) writeRaw(b []byte) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	_ = p.conn.SetWriteDeadline(time.Now().Add(guard))
	return p.conn.WriteMessage(websocket.TextMessage, b)
}

// send writes a frame to the client.
func (p *peer) send(t testing.TB, v any) {
	t.Helper()
	if err := p.write(v); err != nil {
		t.Fatalf("peer %d: send: %v", p.n, err)
	}
}

func (p *peer) sendRaw(t testing.TB, s string) {
	t.Helper()
	if err := p.writeRaw([]byte(s)); err != nil {
		t.Fatalf("peer %d: send: %v", p.n, err)
	}
}

// next returns the next frame the client sent.
func (p *peer) next(t testing.TB) (string, []byte) {
	t.Helper()
	select {
	case raw, ok := <-p.frames:
		if !ok {
			t.Fatalf("peer %d: link closed while a frame was expected", p.n)
		}
		typ, ok := wire.PeekType(raw)
		if !ok {
			t.Fatalf("peer %d: client sent an unparseable frame %s", p.n, raw)
		}
		return typ, raw
	case <-time.After(guard):
		t.Fatalf("peer %d: no frame from the client", p.n)
	}
	return "", nil
}

// expect returns the next frame, which must be of type typ, decoded into a map.
func (p *peer) expect(t testing.TB, typ string) map[string]any {
	t.Helper()
	got, raw := p.next(t)
	if got != typ {
		t.Fatalf("peer %d: expected %s, got %s", p.n, typ, raw)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func (p *peer) expectAck(t testing.TB, runID string) wire.Ack {
	t.Helper()
	_, raw := p.next(t)
	var a wire.Ack
	if err := json.Unmarshal(raw, &a); err != nil || a.Type != wire.TypeAck {
		t.Fatalf("peer %d: expected ack for %s, got %s", p.n, runID, raw)
	}
	if a.RunID != runID {
		t.Fatalf("peer %d: ack for %q, want %q", p.n, a.RunID, runID)
	}
	return a
}

// expectEvent reads an event frame of runID and checks its seq.
func (p *peer) expectEvent(t testing.TB, runID string, seq int64) map[string]any {
	t.Helper()
	_, raw := p.next(t)
	var ev wire.Event
	if err := json.Unmarshal(raw, &ev); err != nil || ev.Type != wire.TypeEvent {
		t.Fatalf("peer %d: expected event %d of %s, got %s", p.n, seq, runID, raw)
	}
	if ev.RunID != runID || ev.ProviderSeq == nil || *ev.ProviderSeq != seq {
		t.Fatalf("peer %d: expected event seq %d of %s, got %s", p.n, seq, runID, raw)
	}
	var body map[string]any
	if err := json.Unmarshal(ev.Event, &body); err != nil {
		t.Fatal(err)
	}
	return body
}

func (p *peer) expectFinish(t testing.TB, runID string) {
	t.Helper()
	m := p.expect(t, wire.TypeFinish)
	if m["runId"] != runID || len(m) != 2 {
		t.Fatalf("peer %d: expected finish of %s, got %v", p.n, runID, m)
	}
}

// closed waits until the client closed the link (or the link dropped) and
// returns the frames it sent before that.
func (p *peer) closed(t testing.TB) [][]byte {
	t.Helper()
	var got [][]byte
	deadline := time.After(guard)
	for {
		select {
		case raw, ok := <-p.frames:
			if !ok {
				return got
			}
			got = append(got, raw)
		case <-deadline:
			t.Fatalf("peer %d: the client did not close the link", p.n)
		}
	}
}

// drop cuts the link without a close frame, as a dying broker would.
func (p *peer) drop() { p.conn.Close() }

// nextPeer waits for the next link to reach the fake.
func (f *fakeFunduq) nextPeer(t testing.TB) *peer {
	t.Helper()
	select {
	case p := <-f.peers:
		return p
	case <-time.After(guard):
		t.Fatal("no link reached funduq")
	}
	return nil
}

// registeredPeer waits for the next link and checks its ceremony completed.
func (f *fakeFunduq) registeredPeer(t testing.TB) *peer {
	t.Helper()
	p := f.nextPeer(t)
	if p.err != nil || p.register == nil {
		t.Fatalf("peer %d: handshake failed: %v", p.n, p.err)
	}
	return p
}

func (f *fakeFunduq) waitTicket(t testing.TB) int {
	t.Helper()
	select {
	case n := <-f.ticketSeen:
		return n
	case <-time.After(guard):
		t.Fatal("no POST /tickets")
	}
	return 0
}

// runFrame is a run offer with a complete RunAgentInput (every key, nulls kept).
func runFrame(runID, agent, thread, text string) wire.RunFrame {
	in := `{"threadId":` + quote(thread) + `,"runId":` + quote("caller-"+runID) + `,"parentRunId":null,"state":null,` +
		`"messages":[{"id":` + quote("m-"+runID) + `,"role":"user","content":` + quote(text) + `,"name":null,"encryptedValue":null}],` +
		`"tools":[],"context":[],"forwardedProps":null,"resume":null}`
	th := thread
	return wire.NewRunFrame(wire.DeliveredRun{
		RunID: runID, AgentName: agent, RunInput: json.RawMessage(in), ThreadID: &th,
	})
}

// gates scripts handlers: each run announces itself on started and waits
// until the test releases it (or its context ends).
type gates struct {
	mu      sync.Mutex
	m       map[string]chan struct{}
	started chan *Run
}

func newGates() *gates {
	return &gates{m: make(map[string]chan struct{}), started: make(chan *Run, 1000)}
}

func (g *gates) gate(id string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	ch, ok := g.m[id]
	if !ok {
		ch = make(chan struct{})
		g.m[id] = ch
	}
	return ch
}

func (g *gates) release(id string) { close(g.gate(id)) }

func (g *gates) handler(ctx context.Context, run *Run) error {
	g.started <- run
	select {
	case <-g.gate(run.ID):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gates) waitStarted(t testing.TB) *Run {
	t.Helper()
	select {
	case r := <-g.started:
		return r
	case <-time.After(guard):
		t.Fatal("no handler started")
	}
	return nil
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// baseConfig is a client of f serving agents, pinned to f's key, with fast
// backoff.
func baseConfig(t *testing.T, f *fakeFunduq, agents ...Agent) Config {
	return Config{
		BaseURL:      f.url(),
		Signer:       mustSigner(t, providerSeedHex),
		FunduqKey:    f.key(),
		ProviderName: "test provider",
		Agents:       agents,
		Logger:       testLogger(t),
		Backoff:      Backoff{Min: time.Millisecond, Max: 5 * time.Millisecond},
	}
}

// startClient runs a client until the test ends, then stops it and checks
// Run returned.
func startClient(t *testing.T, cfg Config, adjust ...func(*Client)) (*Client, func()) {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range adjust {
		a(c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run returned %v", err)
				}
			case <-time.After(guard):
				t.Error("Run did not return after its context ended")
			}
		})
	}
	t.Cleanup(stop)
	return c, stop
}

func intp(n int) *int { return &n }

func hasPrefix(s any, prefix string) bool {
	str, ok := s.(string)
	return ok && strings.HasPrefix(str, prefix)
}

// frame is a client frame read loosely.
type frame struct {
	Type     string         `json:"type"`
	RunID    string         `json:"runId"`
	Seq      *int64         `json:"seq"`
	Event    map[string]any `json:"event"`
	Accepted *bool          `json:"accepted"`
	Reason   *string        `json:"reason"`
	Name     string         `json:"name"`
}

func (fr frame) String() string {
	s := fr.Type + " " + fr.RunID
	if fr.Seq != nil {
		s += fmt.Sprintf(" #%d", *fr.Seq)
	}
	if fr.Event != nil {
		s += fmt.Sprintf(" %v", fr.Event["type"])
	}
	if fr.Accepted != nil {
		s += fmt.Sprintf(" %v", *fr.Accepted)
	}
	return s
}

func (p *peer) nextFrame(t testing.TB) frame {
	t.Helper()
	_, raw := p.next(t)
	var fr frame
	if err := json.Unmarshal(raw, &fr); err != nil {
		t.Fatal(err)
	}
	return fr
}

// earlyFrames are the frames the client sent before its register, as
// frame strings.
func (p *peer) earlyFrames(t testing.TB) []string {
	t.Helper()
	out := make([]string, 0, len(p.early))
	for _, raw := range p.early {
		var fr frame
		if err := json.Unmarshal(raw, &fr); err != nil {
			t.Fatal(err)
		}
		out = append(out, fr.String())
	}
	return out
}
