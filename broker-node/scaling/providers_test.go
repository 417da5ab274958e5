package scaling

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/wire"
	"github.com/funduq/funduq-go/internal/procstack"
	"github.com/funduq/funduq-go/provider"
)

func runtimeGoexit() { runtime.Goexit() }

func seedHex(b byte) string { return strings.Repeat(fmt.Sprintf("%02x", b), 32) }

func newSigner(t testing.TB, b byte) *identity.Signer {
	t.Helper()
	s, err := identity.NewSignerFromSeedHex(seedHex(b))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// book counts, across every link and reconnect of a scenario's providers,
// the offers each run id received and the handler starts for each run id.
type book struct {
	mu     sync.Mutex
	offers map[string]int
	starts map[string]int
	first  map[string]time.Time // first offer (or handler start) seen
}

func newBook() *book {
	return &book{offers: map[string]int{}, starts: map[string]int{}, first: map[string]time.Time{}}
}

func (b *book) offer(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.offers[id]++
	if _, ok := b.first[id]; !ok {
		b.first[id] = time.Now()
	}
}

// start records a handler start and reports whether it is the first.
func (b *book) start(id string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.starts[id]++
	if _, ok := b.first[id]; !ok {
		b.first[id] = time.Now()
	}
	return b.starts[id] == 1
}

func (b *book) firstSeen(id string) (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	at, ok := b.first[id]
	return at, ok
}

func (b *book) startsOf(id string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.starts[id]
}

// checkOnce asserts no handler started twice for one run id.
func (b *book) checkOnce(t testing.TB) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, n := range b.starts {
		if n > 1 {
			t.Errorf("the provider handler started %d times for run %s", n, id)
		}
	}
}

// ---------------------------------------------------------------- scripted provider

// wprov is a provider scripted by the test, speaking the real wire (tickets,
// hello/welcome pinned to funduq's key, register, run/ack/event/finish).
// Unlike nodetest.Prov it is bound to no harness: its ticket and its link
// may be asked of any URL.
type wprov struct {
	t      testing.TB
	signer *identity.Signer
	key    string
	book   *book
	ws     *websocket.Conn
	mu     sync.Mutex
	frames []wframe
	wake   chan struct{}
	closed chan struct{}
	wmu    sync.Mutex
	held   map[string]bool
	// closeCode and closeText are the link's close frame, once closed.
	closeCode int
	closeText string
}

type wframe struct {
	typ string
	raw []byte
	at  time.Time // when the provider's reader took it off the socket
}

// ticket asks base for a ticket for key.
func ticket(t testing.TB, base, key string) (wire.TicketResponse, int) {
	t.Helper()
	var tr wire.TicketResponse
	resp, err := quickLong.Post(base+"/tickets", "application/json", strings.NewReader(`{"publicKey":"`+key+`"}`))
	if err != nil {
		t.Fatalf("POST %s/tickets: %v", base, err)
	}
	defer resp.Body.Close()
	_ = json.NewDecoder(resp.Body).Decode(&tr)
	return tr, resp.StatusCode
}

var quickLong = &http.Client{Timeout: 5 * time.Second}

// refusal is a link-open a node answered without upgrading.
type refusal struct {
	Status     int
	RetryAfter string
	Leader     string
	Body       string
}

// dialProvider opens /ws/provider at base. A node that does not upgrade is
// answered as a refusal.
func dialProvider(base string) (*websocket.Conn, *refusal, error) {
	d := websocket.Dialer{HandshakeTimeout: 3 * time.Second}
	ws, resp, err := d.Dial("ws"+strings.TrimPrefix(base, "http")+"/ws/provider", nil)
	if err == nil {
		return ws, nil, nil
	}
	if resp == nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := &refusal{Status: resp.StatusCode, RetryAfter: resp.Header.Get("Retry-After"), Body: string(b)}
	var body struct {
		Leader string `json:"leader"`
	}
	_ = json.Unmarshal(b, &body)
	r.Leader = body.Leader
	return nil, r, nil
}

// connectProvider fetches a ticket at ticketAt, opens the link at linkAt,
// and completes the handshake, verifying welcome against the pinned key.
func (c *cluster) connectProvider(s *identity.Signer, bk *book, ticketAt, linkAt string) *wprov {
	c.t.Helper()
	tr, code := ticket(c.t, ticketAt, s.PublicKeyHex())
	if code != 201 {
		c.t.Fatalf("ticket at %s: %d", ticketAt, code)
	}
	p, ref := c.openLink(s, bk, tr, linkAt)
	if ref != nil {
		c.t.Fatalf("link at %s refused: %+v", linkAt, *ref)
	}
	return p
}

// openLink presents ticket tr at linkAt; a refused upgrade is returned.
func (c *cluster) openLink(s *identity.Signer, bk *book, tr wire.TicketResponse, linkAt string) (*wprov, *refusal) {
	c.t.Helper()
	if tr.FunduqPublicKey != c.key {
		c.t.Fatalf("the ticket names funduq key %s, pinned %s", tr.FunduqPublicKey, c.key)
	}
	ws, ref, err := dialProvider(linkAt)
	if err != nil {
		c.t.Fatalf("dial %s: %v", linkAt, err)
	}
	if ref != nil {
		return nil, ref
	}
	p := &wprov{t: c.t, signer: s, key: s.PublicKeyHex(), book: bk, ws: ws, wake: make(chan struct{}, 1),
		closed: make(chan struct{}), held: map[string]bool{}}
	ws.SetCloseHandler(func(code int, text string) error {
		p.mu.Lock()
		p.closeCode, p.closeText = code, text
		p.mu.Unlock()
		return nil
	})
	go p.read()
	c.t.Cleanup(p.close)
	nonce := fmt.Sprintf("%032x", time.Now().UnixNano())
	v := wire.Version
	one := 100
	p.send(wire.Hello{Type: wire.TypeHello, Version: &v, PublicKey: p.key, Ticket: tr.Ticket, Nonce: nonce,
		Proof: s.Sign(identity.ProviderConnectPayload(tr.FunduqPublicKey, tr.Ticket, nonce)), MaxConcurrentRuns: &one})
	f, ok := p.next(wire.TypeWelcome, margin)
	if !ok {
		return nil, &refusal{Status: 101, Body: "no welcome: " + p.closeReason()}
	}
	var w wire.Welcome
	_ = json.Unmarshal(f.raw, &w)
	pub, err := identity.ParsePublicKey(w.FunduqPublicKey)
	if err != nil || w.FunduqPublicKey != c.key {
		c.t.Fatalf("welcome names funduq key %s, pinned %s", w.FunduqPublicKey, c.key)
	}
	if err := identity.Verify(pub, identity.FunduqConnectPayload(tr.Ticket, nonce), w.Answer); err != nil {
		c.t.Fatalf("welcome answer does not verify under the pinned key: %v", err)
	}
	return p, nil
}

func (p *wprov) read() {
	defer close(p.closed)
	for {
		_, data, err := p.ws.ReadMessage()
		if err != nil {
			if ce, ok := err.(*websocket.CloseError); ok {
				p.mu.Lock()
				p.closeCode, p.closeText = ce.Code, ce.Text
				p.mu.Unlock()
			}
			return
		}
		typ, _ := wire.PeekType(data)
		if typ == wire.TypeRun && p.book != nil {
			var f wire.RunFrame
			_ = json.Unmarshal(data, &f)
			p.book.offer(f.RunID)
		}
		p.mu.Lock()
		p.frames = append(p.frames, wframe{typ: typ, raw: data, at: time.Now()})
		p.mu.Unlock()
		select {
		case p.wake <- struct{}{}:
		default:
		}
	}
}

func (p *wprov) closeReason() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprintf("close %d %q", p.closeCode, p.closeText)
}

// waitClosed waits (at most bound) for the link to close.
func (p *wprov) waitClosed(bound time.Duration) bool {
	select {
	case <-p.closed:
		return true
	case <-time.After(bound):
		return false
	}
}

func (p *wprov) close() {
	_ = p.ws.Close()
	<-p.closed
}

func (p *wprov) send(v any) {
	b, _ := json.Marshal(v)
	p.wmu.Lock()
	defer p.wmu.Unlock()
	_ = p.ws.SetWriteDeadline(time.Now().Add(2 * time.Second))
	if err := p.ws.WriteMessage(websocket.TextMessage, b); err != nil {
		p.t.Logf("provider %s: send: %v", p.key[:8], err)
	}
}

// next takes the first waiting frame of type typ (others stay queued),
// waiting at most bound.
func (p *wprov) next(typ string, bound time.Duration) (wframe, bool) {
	deadline := time.After(bound)
	for {
		p.mu.Lock()
		for i, f := range p.frames {
			if f.typ == typ {
				p.frames = append(p.frames[:i:i], p.frames[i+1:]...)
				p.mu.Unlock()
				return f, true
			}
		}
		p.mu.Unlock()
		select {
		case <-p.wake:
		case <-p.closed:
			// drain what arrived before the close
			p.mu.Lock()
			for i, f := range p.frames {
				if f.typ == typ {
					p.frames = append(p.frames[:i:i], p.frames[i+1:]...)
					p.mu.Unlock()
					return f, true
				}
			}
			p.mu.Unlock()
			return wframe{}, false
		case <-deadline:
			return wframe{}, false
		}
	}
}

// has reports whether a frame of type typ is waiting, without taking it.
func (p *wprov) has(typ string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range p.frames {
		if f.typ == typ {
			return true
		}
	}
	return false
}

// settled is a query round trip on the link, for a negative claim about
// what the link sent: funduq answers a query (here of a method it does
// not serve) only once every event the link sent before it is stored or
// refused and every finish taken or refused (design.md §The provider
// wire). It reports whether the answer came; a leader that stepped down
// leaves it unanswered, and then it waits for the link to close. Other
// frames stay queued for next.
func (p *wprov) settled(bound time.Duration) (answered bool) {
	p.t.Helper()
	id := fmt.Sprintf("scaling-settled-%d", queryIDs.Add(1))
	p.send(wire.Query{Type: wire.TypeQuery, QueryID: id, Method: "scaling.settled", Params: json.RawMessage(`{}`)})
	deadline := time.Now().Add(bound)
	for {
		f, ok := p.next(wire.TypeQueryResult, time.Until(deadline))
		if !ok {
			select {
			case <-p.closed:
				return false
			default:
			}
			p.t.Fatalf("query %s neither answered nor the link closed within %v", id, bound)
		}
		var r wire.QueryResult
		if json.Unmarshal(f.raw, &r) == nil && r.QueryID == id {
			return true
		}
	}
}

// queryIDs numbers the settled queries of every provider in the package.
var queryIDs atomic.Int64

func (p *wprov) register(names ...string) {
	p.t.Helper()
	var regs []wire.Registration
	for _, n := range names {
		regs = append(regs, wire.Registration{Name: n})
	}
	p.send(wire.Register{Type: wire.TypeRegister, Agents: regs})
	if _, ok := p.next(wire.TypeRegistered, margin); !ok {
		p.t.Fatalf("no registered within %v (%s)", margin, p.closeReason())
	}
}

// offer waits (at most bound) for a run frame.
func (p *wprov) offer(bound time.Duration) wire.RunFrame {
	p.t.Helper()
	f, ok := p.next(wire.TypeRun, bound)
	if !ok {
		p.t.Fatalf("no offer within %v (%s)", bound, p.closeReason())
	}
	var rf wire.RunFrame
	_ = json.Unmarshal(f.raw, &rf)
	return rf
}

// accept acks run id; the first accept of a run id is its "handler start".
// A run this provider already holds is accepted again without a restart.
func (p *wprov) accept(id string) {
	p.mu.Lock()
	already := p.held[id]
	p.held[id] = true
	p.mu.Unlock()
	if !already && p.book != nil {
		p.book.start(id)
	}
	p.send(wire.Ack{Type: wire.TypeAck, RunID: id})
}

// adopt marks run id as held (carried over from an earlier link of the
// same provider).
func (p *wprov) adopt(id string) {
	p.mu.Lock()
	p.held[id] = true
	p.mu.Unlock()
}

func (p *wprov) event(id string, seq int64, ev string) {
	fr := wire.Event{Type: wire.TypeEvent, RunID: id, Event: json.RawMessage(ev)}
	if seq > 0 {
		fr.ProviderSeq = &seq
	}
	p.send(fr)
}

func (p *wprov) finish(id string) { p.send(wire.Finish{Type: wire.TypeFinish, RunID: id}) }

func startedEv(thread, id string) string {
	return fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id)
}
func deltaEv(msg, text string) string {
	return fmt.Sprintf(`{"type":"TEXT_MESSAGE_CONTENT","messageId":%q,"delta":%q}`, msg, text)
}
func finishedEv(thread, id string) string {
	return fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, thread, id)
}

// complete streams a short answer with provider seqs from seq and finishes.
func (p *wprov) complete(id, thread string, seq int64) {
	p.event(id, seq, `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`)
	p.event(id, seq+1, deltaEv("m1", "hello"))
	p.event(id, seq+2, `{"type":"TEXT_MESSAGE_END","messageId":"m1"}`)
	p.event(id, seq+3, finishedEv(thread, id))
	p.finish(id)
}

// ---------------------------------------------------------------- SDK provider

// sdkProvider runs a provider built with our Go SDK until the test ends
// and returns once it has registered.
func (c *cluster) sdkProvider(s *identity.Signer, base string, agents ...provider.Agent) *procstack.SDK {
	c.t.Helper()
	return c.runSDK(provider.Config{
		BaseURL: base, Signer: s, FunduqKey: c.key, Agents: agents,
		Backoff:      provider.Backoff{Min: 50 * time.Millisecond, Max: 300 * time.Millisecond},
		PingInterval: 400 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
}

// holdAgent is an SDK agent that records its start, emits RUN_STARTED and
// waits for release (or a cancel), then answers and finishes.
func holdAgent(name string, bk *book, release <-chan struct{}) provider.Agent {
	return provider.Agent{Name: name, Handler: func(ctx context.Context, r *provider.Run) error {
		bk.start(r.ID)
		if err := r.Emit(ctx, map[string]any{"type": "RUN_STARTED", "threadId": r.ThreadID, "runId": r.ID}); err != nil {
			return err
		}
		select {
		case <-release:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		if err := r.EmitText(ctx, r.ID+"-m", "done: "+r.LastUserText()); err != nil {
			return err
		}
		return r.Emit(ctx, map[string]any{"type": "RUN_FINISHED", "threadId": r.ThreadID, "runId": r.ID})
	}}
}

// tickAgent emits RUN_STARTED, n deltas every every, RUN_FINISHED.
func tickAgent(name string, bk *book, n int, every time.Duration) provider.Agent {
	return provider.Agent{Name: name, Handler: func(ctx context.Context, r *provider.Run) error {
		bk.start(r.ID)
		if err := r.Emit(ctx, map[string]any{"type": "RUN_STARTED", "threadId": r.ThreadID, "runId": r.ID}); err != nil {
			return err
		}
		if err := r.Emit(ctx, map[string]any{"type": "TEXT_MESSAGE_START", "messageId": r.ID + "-m", "role": "assistant"}); err != nil {
			return err
		}
		for i := range n {
			select {
			case <-time.After(every):
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			if err := r.Emit(ctx, map[string]any{"type": "TEXT_MESSAGE_CONTENT", "messageId": r.ID + "-m", "delta": fmt.Sprintf("tick %d ", i)}); err != nil {
				return err
			}
		}
		if err := r.Emit(ctx, map[string]any{"type": "TEXT_MESSAGE_END", "messageId": r.ID + "-m"}); err != nil {
			return err
		}
		return r.Emit(ctx, map[string]any{"type": "RUN_FINISHED", "threadId": r.ThreadID, "runId": r.ID})
	}}
}
