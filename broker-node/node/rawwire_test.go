package node_test

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
)

// rawProv is a provider written against the wire alone (design.md §The
// provider wire, the spec's seeds), with gorilla/websocket and no code of
// funduq's SDK or of nodetest's provider: what it sends is the bytes the
// test writes, in the WebSocket framing the test chooses.
type rawProv struct {
	t      *testing.T
	ws     *websocket.Conn
	key    string
	frames chan rawFrame
	pongs  chan string
	done   chan struct{}
	err    error // the read's end, once done is closed
	// stall, once closed, stops the reader taking anything more off the
	// socket (after the message it may be reading) until quit closes.
	stall, quit chan struct{}
}

type rawFrame struct {
	kind int
	data []byte
}

// rawDial takes a ticket, opens /ws/provider with d, says hello with the
// key of seed and checks welcome's answer.
func rawDial(t *testing.T, h *nodetest.Harness, seed byte, d *websocket.Dialer) *rawProv {
	t.Helper()
	s, err := identity.NewSignerFromSeedHex(nodetest.SeedHex(seed))
	if err != nil {
		t.Fatal(err)
	}
	key := s.PublicKeyHex()
	resp, err := http.Post(h.URL+"/tickets", "application/json", strings.NewReader(`{"publicKey":"`+key+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	var tr struct{ Ticket, FunduqPublicKey string }
	_ = json.NewDecoder(resp.Body).Decode(&tr)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("tickets: %d", resp.StatusCode)
	}
	if d == nil {
		d = websocket.DefaultDialer
	}
	ws, resp, err := d.Dial("ws"+strings.TrimPrefix(h.URL, "http")+"/ws/provider", nil)
	if err != nil {
		t.Fatal(err)
	}
	if ext := resp.Header.Get("Sec-WebSocket-Extensions"); ext != "" {
		t.Fatalf("funduq took up the extension %q; the wire has none", ext)
	}
	p := &rawProv{t: t, ws: ws, key: key, frames: make(chan rawFrame, 4096), pongs: make(chan string, 16), done: make(chan struct{}),
		stall: make(chan struct{}), quit: make(chan struct{})}
	ws.SetPongHandler(func(s string) error { p.pongs <- s; return nil })
	nonce := fmt.Sprintf("%032x", time.Now().UnixNano())
	proof := s.Sign(identity.ProviderConnectPayload(tr.FunduqPublicKey, tr.Ticket, nonce))
	p.text(fmt.Sprintf(`{"type":"hello","version":4,"publicKey":%q,"ticket":%q,"nonce":%q,"proof":%q}`, key, tr.Ticket, nonce, proof))
	go func() {
		defer close(p.done)
		for {
			select {
			case <-p.stall:
				<-p.quit
				return
			default:
			}
			kind, b, err := ws.ReadMessage()
			if err != nil {
				p.err = err
				return
			}
			select {
			case p.frames <- rawFrame{kind, b}:
			case <-p.quit:
				return
			}
		}
	}()
	var w struct{ Type, FunduqPublicKey, Answer string }
	if err := json.Unmarshal(p.next().data, &w); err != nil || w.Type != "welcome" {
		t.Fatalf("welcome: %+v %v", w, err)
	}
	pub, _ := identity.ParsePublicKey(w.FunduqPublicKey)
	if err := identity.Verify(pub, identity.FunduqConnectPayload(tr.Ticket, nonce), w.Answer); err != nil {
		t.Fatalf("welcome answer: %v", err)
	}
	t.Cleanup(func() { close(p.quit); _ = ws.Close(); <-p.done })
	return p
}

func (p *rawProv) text(s string) {
	p.t.Helper()
	if err := p.ws.WriteMessage(websocket.TextMessage, []byte(s)); err != nil {
		p.t.Fatalf("write: %v", err)
	}
}

func (p *rawProv) next() rawFrame {
	p.t.Helper()
	select {
	case f := <-p.frames:
		return f
	case <-p.done:
		select {
		case f := <-p.frames:
			return f
		default:
		}
		p.t.Fatalf("link closed while waiting for a frame: %v", p.err)
	case <-time.After(time.Minute):
		p.t.Fatal("no frame arrived")
	}
	return rawFrame{}
}

// expect reads the next frame, which must be of type typ, into v.
func (p *rawProv) expect(typ string, v any) map[string]any {
	p.t.Helper()
	f := p.next()
	var m map[string]any
	if err := json.Unmarshal(f.data, &m); err != nil || m["type"] != typ {
		p.t.Fatalf("frame %s, want %s", f.data, typ)
	}
	if v != nil {
		_ = json.Unmarshal(f.data, v)
	}
	return m
}

// barrier sends a query of a method funduq does not know and returns the
// frames that came before its answer: everything funduq wrote before it
// read the query.
func (p *rawProv) barrier(id string) []map[string]any {
	p.t.Helper()
	p.text(`{"type":"query","queryId":"` + id + `","method":"raw.barrier","params":{}}`)
	var before []map[string]any
	for {
		f := p.next()
		var m map[string]any
		_ = json.Unmarshal(f.data, &m)
		if m["type"] == wire.TypeQueryResult && m["queryId"] == id {
			return before
		}
		before = append(before, m)
	}
}

func (p *rawProv) register(names ...string) {
	p.t.Helper()
	var regs []string
	for _, n := range names {
		regs = append(regs, fmt.Sprintf(`{"name":%q,"description":"raw"}`, n))
	}
	p.text(`{"type":"register","agents":[` + strings.Join(regs, ",") + `]}`)
	p.expect(wire.TypeRegistered, nil)
}

// startRun starts a run of agent through the door and expects its offer
// as the link's next frame.
func (p *rawProv) startRun(h *nodetest.Harness, agent string) (id, thread string) {
	p.t.Helper()
	id, thread = h.Door(p.key, agent, "", "hi")
	if got := p.offer(); got != id {
		p.t.Fatalf("offered %s, want %s", got, id)
	}
	return id, thread
}

func (p *rawProv) offer() string {
	p.t.Helper()
	var r struct{ RunID string }
	p.expect(wire.TypeRun, &r)
	return r.RunID
}

// A name or thread id holding a NUL can never have been stored (PostgreSQL
// text holds no NUL), so the answer is the one for a name never registered
// or a thread that is not the provider's. It used to reach PostgreSQL,
// which refused the data, and the provider was told funduq could not do it
// "right now": a deleteAgent's "try again", a query's ask-again text, which
// our SDK reports as provider.ErrQueryAskAgain — to be asked again for good.
func TestRawUnstorableNamesAreAnsweredAsUnknown(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := rawDial(t, h, 0x72, nil)
	p.register("echo")
	var e struct{ Message, Name string }
	p.text(`{"type":"deleteAgent","name":"echo\u0000"}`)
	p.expect(wire.TypeError, &e)
	if e.Message != `agent "echo\x00" is not registered` || e.Name != "echo\x00" {
		t.Errorf("deleteAgent of a name with a NUL answered %+v; want it not registered", e)
	}
	var q wire.QueryResult
	p.text(`{"type":"query","queryId":"q1","method":"thread_messages","params":{"threadId":"thr\u0000"}}`)
	p.expect(wire.TypeQueryResult, &q)
	if q.QueryID != "q1" || q.Error != "no such thread for this provider" {
		t.Errorf("thread_messages of a thread id with a NUL answered %+v; want no such thread", q)
	}
	// The agent is still served: the refusal changed nothing.
	p.startRun(h, "echo")
}

// A provider's seq is an integer (design.md D7, an extension of funduq's):
// one written with a fraction or an exponent, 1.0 or 1e0, is refused naming
// the run and saying so — not "out of range", which it is not — and the run
// goes on. Any integer bigint holds is a seq, matched exactly: 2^53 and
// 2^53+1, one apart where a float64 would make them one, are two events.
func TestRawSeqShapes(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := rawDial(t, h, 0x73, nil)
	p.register("echo")
	id, thread := p.startRun(h, "echo")
	p.text(`{"type":"ack","runId":"` + id + `"}`)
	p.text(fmt.Sprintf(`{"type":"event","runId":%q,"event":{"type":"RUN_STARTED","threadId":%q,"runId":%q}}`, id, thread, id))
	for _, seq := range []string{"1.0", "1e0", "1.5", "-1e3"} {
		p.text(`{"type":"event","runId":"` + id + `","seq":` + seq + `,"event":{"type":"STEP_STARTED","stepName":"s"}}`)
		var e struct{ Message, RunID string }
		p.expect(wire.TypeError, &e)
		if e.RunID != id || !strings.Contains(e.Message, "seq must be an integer written without a fraction or exponent") {
			t.Errorf("seq %s answered %+v; want a refusal naming the run that says seq must be an integer", seq, e)
		}
	}
	p.text(`{"type":"event","runId":"` + id + `","seq":9223372036854775808,"event":{"type":"STEP_STARTED","stepName":"s"}}`)
	var e struct{ Message, RunID string }
	p.expect(wire.TypeError, &e)
	if e.RunID != id || !strings.Contains(e.Message, "seq is out of range") {
		t.Errorf("seq 2^63 answered %+v; want out of range", e)
	}
	for i, seq := range []string{"-1", "0", "9007199254740992", "9007199254740993", "9223372036854775807"} {
		p.text(fmt.Sprintf(`{"type":"event","runId":%q,"seq":%s,"event":{"type":"STEP_STARTED","stepName":"s%d"}}`, id, seq, i))
	}
	// One resent as it was: stored once, answered nothing.
	p.text(fmt.Sprintf(`{"type":"event","runId":%q,"seq":9007199254740992,"event":{"type":"STEP_STARTED","stepName":"s2"}}`, id))
	if got := p.barrier("b1"); len(got) != 0 {
		t.Fatalf("integer seqs answered %v", got)
	}
	steps := 0
	for _, e := range h.Events(id) {
		if e["type"] == "STEP_STARTED" {
			steps++
		}
	}
	if steps != 5 {
		t.Errorf("stored %d STEP_STARTED events, want 5 (each integer seq once)", steps)
	}
	p.text(fmt.Sprintf(`{"type":"event","runId":%q,"event":{"type":"RUN_FINISHED","threadId":%q,"runId":%q}}`, id, thread, id))
	p.text(`{"type":"finish","runId":"` + id + `"}`)
	h.WaitStatus(id, run.Completed)
}

// A refusal is recorded verbatim (TestRefusalRecordsReasonVerbatim), so one
// whose reason holds a NUL, which PostgreSQL's text cannot, is refused
// naming the run and saying why, and the offer stays out for the
// provider's next answer. It used to fail the run as "provider sent a
// malformed AG-UI event" — the provider sent no event, and the caller was
// told "the provider sent an AG-UI event that does not validate" — with
// nothing said to the provider (D15).
func TestRawRefusalReasonWithANULIsRefused(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := rawDial(t, h, 0x74, nil)
	p.register("echo")
	id, _ := p.startRun(h, "echo")
	p.text(`{"type":"ack","runId":"` + id + `","accepted":false,"reason":"no\u0000pe"}`)
	var e struct{ Message, RunID string }
	p.expect(wire.TypeError, &e)
	if e.RunID != id || !strings.Contains(e.Message, "NUL") {
		t.Fatalf("a refusal whose reason holds a NUL answered %+v; want it refused naming the run and the NUL", e)
	}
	p.text(`{"type":"ack","runId":"` + id + `","accepted":false,"reason":"nope"}`)
	if r := h.WaitStatus(id, run.Failed); r.FailureReason != "nope" {
		t.Errorf("the run failed %q, want the provider's reason", r.FailureReason)
	}
	if q := h.Quality(p.key); charges(q) != 0 {
		t.Errorf("counted %+v", q)
	}
}

// writeWire writes one WebSocket frame as the test spells it, masked as a
// client's must be: fin, rsv1 and the opcode as given, so the test can send
// what gorilla's writer never would (a control frame inside a fragmented
// message, reserved bits).
func (p *rawProv) writeWire(fin, rsv1 bool, opcode byte, payload []byte) {
	p.t.Helper()
	b0 := opcode
	if fin {
		b0 |= 0x80
	}
	if rsv1 {
		b0 |= 0x40
	}
	hdr := []byte{b0}
	switch n := len(payload); {
	case n < 126:
		hdr = append(hdr, 0x80|byte(n))
	case n < 1<<16:
		hdr = append(hdr, 0x80|126, byte(n>>8), byte(n))
	default:
		hdr = append(hdr, 0x80|127)
		hdr = binary.BigEndian.AppendUint64(hdr, uint64(n))
	}
	var mask [4]byte
	_, _ = rand.Read(mask[:])
	hdr = append(hdr, mask[:]...)
	body := make([]byte, len(payload))
	for i := range payload {
		body[i] = payload[i] ^ mask[i%4]
	}
	if _, err := p.ws.UnderlyingConn().Write(append(hdr, body...)); err != nil {
		p.t.Fatalf("write: %v", err)
	}
}

// What a WebSocket peer may do that our SDK never shows is taken or
// answered, never dropped unseen (D15): permessage-deflate offered is not
// taken up; a text message in many fragments, and one with a ping between
// its fragments, is read as one frame; a binary message is refused with an
// error frame and changes nothing; a ping's payload comes back in its
// pong, and an unsolicited pong is no frame at all; a frame of exactly
// FUNDUQ_MAX_FRAME_BYTES is read, one byte more is refused naming the
// setting, and the link stays open through all of it.
func TestRawWebSocketFramingIsTakenOrAnswered(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) { c.MaxFrame, c.MaxEventBytes = 4096, 1024 })
	// A 64-byte write buffer makes gorilla send each message as
	// fragments of at most that much.
	p := rawDial(t, h, 0x75, &websocket.Dialer{WriteBufferSize: 64, EnableCompression: true})
	p.text(`{"type":"register","agents":[{"name":"frag","description":"` + strings.Repeat("d", 300) + `"}]}`)
	var reg wire.Registered
	p.expect(wire.TypeRegistered, &reg)
	if len(reg.Names) != 1 || reg.Names[0] != "frag" {
		t.Fatalf("registered %+v", reg)
	}
	// A deleteAgent split by hand, a ping between its two halves.
	del := []byte(`{"type":"deleteAgent","name":"other"}`)
	p.writeWire(false, false, websocket.TextMessage, del[:10])
	p.writeWire(true, false, websocket.PingMessage, []byte("mid"))
	p.writeWire(true, false, 0 /* continuation */, del[10:])
	var e wire.Error
	p.expect(wire.TypeError, &e)
	if e.Name != "other" || !strings.Contains(e.Message, "not registered") {
		t.Errorf("the fragmented deleteAgent answered %+v", e)
	}
	if got := <-p.pongs; got != "mid" {
		t.Errorf("pong %q to the ping between fragments", got)
	}
	if err := p.ws.WriteMessage(websocket.BinaryMessage, []byte(`{"type":"deleteAgent","name":"frag"}`)); err != nil {
		t.Fatal(err)
	}
	e = wire.Error{}
	p.expect(wire.TypeError, &e)
	if !strings.Contains(e.Message, "not a text message") || e.Name != "" {
		t.Errorf("a binary frame answered %+v", e)
	}
	if err := p.ws.WriteControl(websocket.PingMessage, []byte("payload"), time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := <-p.pongs; got != "payload" {
		t.Errorf("pong %q, want the ping's payload", got)
	}
	if err := p.ws.WriteControl(websocket.PongMessage, []byte("unasked"), time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if got := p.barrier("b1"); len(got) != 0 {
		t.Errorf("an unsolicited pong answered %v", got)
	}
	pad := func(n int) string {
		base := `{"type":"deleteAgent","name":"pad","x":""}`
		return `{"type":"deleteAgent","name":"pad","x":"` + strings.Repeat("p", n-len(base)) + `"}`
	}
	p.text(pad(4096))
	e = wire.Error{}
	p.expect(wire.TypeError, &e)
	if e.Name != "pad" || !strings.Contains(e.Message, "not registered") {
		t.Errorf("a frame of exactly the limit answered %+v; want it read", e)
	}
	p.text(pad(4097))
	e = wire.Error{}
	p.expect(wire.TypeError, &e)
	if !strings.Contains(e.Message, "FUNDUQ_MAX_FRAME_BYTES") || e.Name != "" {
		t.Errorf("a frame one byte over the limit answered %+v", e)
	}
	// Nothing of that changed what the link serves.
	p.startRun(h, "frag")
}

// A frame with a reserved bit set, as a peer compressing without having
// agreed permessage-deflate sends, is a protocol error: funduq closes the
// link with 1002 and says why, rather than reading it as text.
func TestRawReservedBitClosesWithAReason(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := rawDial(t, h, 0x76, nil)
	p.register("echo")
	p.writeWire(true, true, websocket.TextMessage, []byte(`{"type":"deleteAgent","name":"echo"}`))
	<-p.done
	var ce *websocket.CloseError
	if !errors.As(p.err, &ce) || ce.Code != websocket.CloseProtocolError || ce.Text == "" {
		t.Fatalf("the link ended %v; want 1002 with a reason", p.err)
	}
}

// Any close frame is a goodbye (D5), whatever its code: a provider closing
// with an application code (4000) while it holds a run has left it, and the
// run fails at once, counted abandoned, rather than waiting the link grace.
func TestRawCloseWithAnApplicationCodeIsAGoodbye(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = time.Hour })
	p := rawDial(t, h, 0x77, nil)
	p.register("echo")
	id, _ := p.startRun(h, "echo")
	p.text(`{"type":"ack","runId":"` + id + `"}`)
	h.WaitStatus(id, run.Running)
	if err := p.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(4000, "going"), time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	<-p.done
	failedHoldingIt(t, h, id, p.key)
}

// A provider that stops reading its socket (its TCP window full) holds
// nobody else up: another key's run is offered and completed meanwhile,
// and a run offered to the stalled key waits for it. funduq ends the
// stalled link by itself — its send queue full or a write timed out —
// as a lost link (D5: no goodbye), so the run it holds is held for the link
// grace, and the key back on a new link carries it on and is offered what
// waited, with nothing counted.
func TestRawStalledReaderHoldsNobodyElseUp(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = time.Hour })
	// A receive buffer of a few KB: the window fills after a few frames.
	small := &net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 2048) })
		return errors.Join(err, serr)
	}}
	a := rawDial(t, h, 0x78, &websocket.Dialer{NetDialContext: small.DialContext, ReadBufferSize: 256})
	a.register("slow")
	b := rawDial(t, h, 0x79, nil)
	b.register("fast")
	held, thread := h.Door(a.key, "slow", "", strings.Repeat("long ", 4000))
	if got := a.offer(); got != held {
		t.Fatalf("offered %s, want %s", got, held)
	}
	a.text(`{"type":"ack","runId":"` + held + `"}`)
	h.WaitStatus(held, run.Running)
	// a's reader stops: nothing more is taken off its socket. It asks for
	// its thread (20 KB an answer) until funduq stops taking its frames
	// or ends the link.
	close(a.stall)
	q := fmt.Sprintf(`{"type":"query","queryId":"q","method":"thread_messages","params":{"threadId":%q}}`, thread)
	go func() {
		for {
			_ = a.ws.SetWriteDeadline(time.Now().Add(time.Second))
			if a.ws.WriteMessage(websocket.TextMessage, []byte(q)) != nil {
				return
			}
		}
	}()
	waiting, _ := h.Door(a.key, "slow", "", "later")
	// b is served meanwhile.
	id, bthread := h.Door(b.key, "fast", "", "hi")
	if got := b.offer(); got != id {
		t.Fatalf("offered %s, want %s", got, id)
	}
	b.text(`{"type":"ack","runId":"` + id + `"}`)
	rawComplete(b, id, bthread)
	h.WaitStatus(id, run.Completed)
	h.Eventually("funduq ends the stalled link", func() bool { return h.Node.Broker.Snapshot().Links == 1 })
	h.Settle()
	if r := h.Run(held); r.Status != run.Running {
		t.Fatalf("the run the stalled link held is %s (%s) inside the link grace", r.Status, r.FailureReason)
	}
	a2 := rawDial(t, h, 0x78, nil)
	a2.register("slow")
	if got := a2.offer(); got != waiting {
		t.Fatalf("offered %s, want the run that waited, %s", got, waiting)
	}
	a2.text(`{"type":"ack","runId":"` + waiting + `"}`)
	rawComplete(a2, held, thread)
	h.WaitStatus(held, run.Completed)
	h.Settle()
	if q := h.Quality(a.key); charges(q) != 0 {
		t.Errorf("counted %+v against the stalled key", q)
	}
}

// rawComplete streams a short successful answer for runID and finishes.
func rawComplete(p *rawProv, runID, threadID string) {
	p.t.Helper()
	for _, ev := range []string{
		fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, threadID, runID),
		`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`,
		`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hello"}`,
		`{"type":"TEXT_MESSAGE_END","messageId":"m1"}`,
		fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, threadID, runID),
	} {
		p.text(`{"type":"event","runId":"` + runID + `","event":` + ev + `}`)
	}
	p.text(`{"type":"finish","runId":"` + runID + `"}`)
}

// A provider that loses its link mid-run and resends on a new one (D5, D7):
// an event resent as it was is stored once and answered nothing; another
// event under a seq the run already stored is refused naming the run and
// not stored. The same event written with its members in another order is
// a resend too (design.md D7, "A resend is the same JSON value"), taken
// silently though it follows the other event under its seq — in the same
// batch, the store tells which of the two the round holds — and the run
// completes with each event once.
func TestRawResendAfterAReconnect(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = time.Hour })
	p := rawDial(t, h, 0x7a, nil)
	p.register("echo")
	id, thread := p.startRun(h, "echo")
	p.text(`{"type":"ack","runId":"` + id + `"}`)
	frame := func(seq int, ev string) string {
		return fmt.Sprintf(`{"type":"event","runId":%q,"seq":%d,"event":%s}`, id, seq, ev)
	}
	started := fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id)
	opened := `{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`
	p.text(frame(1, started))
	p.text(frame(2, opened))
	if got := p.barrier("stored"); len(got) != 0 {
		t.Fatalf("answered %v", got)
	}
	_ = p.ws.Close() // lost: no close frame
	h.Eventually("the link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 0 })

	p2 := rawDial(t, h, 0x7a, nil)
	p2.register("echo")
	p2.text(frame(1, started)) // a resend: taken, stored once
	p2.text(frame(2, `{"type":"TEXT_MESSAGE_START","messageId":"m2","role":"assistant"}`))
	p2.text(frame(2, `{"role":"assistant","type":"TEXT_MESSAGE_START","messageId":"m1"}`))
	var e struct{ Message, RunID string }
	p2.expect(wire.TypeError, &e)
	if e.RunID != id || !strings.Contains(e.Message, "seq is already taken") {
		t.Errorf("another event under a stored seq answered %+v", e)
	}
	p2.text(frame(3, `{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hello"}`))
	p2.text(frame(4, `{"type":"TEXT_MESSAGE_END","messageId":"m1"}`))
	p2.text(frame(5, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, thread, id)))
	p2.text(`{"type":"finish","runId":"` + id + `"}`)
	h.WaitStatus(id, run.Completed)
	if got := p2.barrier("end"); len(got) != 0 {
		t.Errorf("the resends were answered %v", got)
	}
	var types []string
	for _, e := range h.Events(id) {
		types = append(types, fmt.Sprint(e["type"]))
	}
	if want := "RUN_STARTED TEXT_MESSAGE_START TEXT_MESSAGE_CONTENT TEXT_MESSAGE_END RUN_FINISHED"; strings.Join(types, " ") != want {
		t.Errorf("stored %v, want %s", types, want)
	}
	h.Settle()
	if q := h.Quality(p.key); charges(q) != 0 {
		t.Errorf("counted %+v", q)
	}
}

// A close frame whose code no peer may send (1005 is "no code", never on
// the wire, RFC 6455 §7.4.1) is a protocol error, not a goodbye: funduq
// answers 1002 saying which code, and the link is lost, as one dropped
// without a close frame is — the run it holds waits the link grace for
// its key (D5) rather than failing at once, and nothing is counted.
func TestRawCloseWithAnInvalidCodeIsALostLink(t *testing.T) {
	h := nodetest.Start(t, func(c *configBroker) { c.LinkGrace = time.Hour })
	p := rawDial(t, h, 0x7d, nil)
	p.register("echo")
	id, thread := p.startRun(h, "echo")
	p.text(`{"type":"ack","runId":"` + id + `"}`)
	h.WaitStatus(id, run.Running)
	p.writeWire(true, false, websocket.CloseMessage, []byte{0x03, 0xed}) // 1005
	<-p.done
	var ce *websocket.CloseError
	if !errors.As(p.err, &ce) || ce.Code != websocket.CloseProtocolError || !strings.Contains(ce.Text, "1005") {
		t.Fatalf("the link ended %v; want 1002 naming the code", p.err)
	}
	h.Eventually("the link is gone", func() bool { return h.Node.Broker.Snapshot().Links == 0 })
	h.Settle()
	if r := h.Run(id); r.Status != run.Running {
		t.Fatalf("the run is %s (%s); want it held for the link grace", r.Status, r.FailureReason)
	}
	back := rawDial(t, h, 0x7d, nil)
	back.register("echo")
	rawComplete(back, id, thread)
	h.WaitStatus(id, run.Completed)
	h.Settle()
	if q := h.Quality(p.key); charges(q) != 0 {
		t.Errorf("counted %+v", q)
	}
}

// A frame's members are read by their exact names, as the reference reads
// them (design.md §The provider wire, "Exact names"): a member whose name
// differs from one of its frame's fields only in case is not that field,
// and the frame is refused saying which member — where encoding/json
// matched names ignoring case, the last match winning, so an event naming
// "runId" one run and "RUNID" another was stored to the second. Nothing
// of such a frame is taken; the run goes on and takes the frames that name
// their fields exactly.
func TestRawKeysDifferingInCaseAreRefused(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := rawDial(t, h, 0x7e, nil)
	p.register("echo")
	id, thread := p.startRun(h, "echo")
	p.text(`{"type":"ack","runId":"` + id + `"}`)
	h.WaitStatus(id, run.Running)
	p.text(fmt.Sprintf(`{"type":"event","runId":"run_nope","RUNID":%q,"event":{"type":"RUN_STARTED","threadId":%q,"runId":%q}}`, id, thread, id))
	p.text(fmt.Sprintf(`{"type":"event","RunId":%q,"event":{"type":"RUN_STARTED","threadId":%q,"runId":%q}}`, id, thread, id))
	p.text(fmt.Sprintf(`{"type":"event","runId":%q,"Event":{"type":"RUN_STARTED","threadId":%q,"runId":%q}}`, id, thread, id))
	got := p.barrier("b")
	want := []struct{ runID, msg string }{
		{"run_nope", `event refused: member "RUNID" differs from "runId" only in case`},
		{"", `event refused: member "RunId" differs from "runId" only in case`},
		{id, `event refused: member "Event" differs from "event" only in case`},
	}
	if len(got) != len(want) {
		t.Fatalf("answered %v; want %d refusals", got, len(want))
	}
	for i, w := range want {
		if got[i]["type"] != wire.TypeError || got[i]["message"] != w.msg || (got[i]["runId"] != nil || w.runID != "") && got[i]["runId"] != w.runID {
			t.Errorf("frame %d answered %v; want an error %q naming run %q", i, got[i], w.msg, w.runID)
		}
	}
	if evs := h.Events(id); len(evs) != 0 {
		t.Fatalf("stored %v from frames that name no field exactly", evs)
	}
	rawComplete(p, id, thread)
	h.WaitStatus(id, run.Completed)
}

// A finish naming its run only as "RunId" names no run (the reference
// reads exactly "runId"): it is refused as a finish without one, saying
// which member it has instead, and the run is not finished by it.
func TestRawFinishNamingOnlyRunIdIsRefused(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := rawDial(t, h, 0x6e, nil)
	p.register("echo")
	id, thread := p.startRun(h, "echo")
	p.text(`{"type":"ack","runId":"` + id + `"}`)
	p.text(fmt.Sprintf(`{"type":"event","runId":%q,"event":{"type":"RUN_STARTED","threadId":%q,"runId":%q}}`, id, thread, id))
	p.text(fmt.Sprintf(`{"type":"event","runId":%q,"event":{"type":"RUN_FINISHED","threadId":%q,"runId":%q}}`, id, thread, id))
	p.text(`{"type":"finish","RunId":"` + id + `"}`)
	got := p.barrier("b")
	if len(got) != 1 || got[0]["type"] != wire.TypeError || got[0]["runId"] != nil ||
		got[0]["message"] != `finish refused: member "RunId" differs from "runId" only in case` {
		t.Fatalf("answered %v; want one error saying the finish's RunId is not its runId", got)
	}
	if r := h.Run(id); r.Status != run.Running {
		t.Fatalf("the run is %s; a finish naming no runId finished it", r.Status)
	}
	p.text(`{"type":"finish","runId":"` + id + `"}`)
	h.WaitStatus(id, run.Completed)
}

// Every other frame a provider sends is read by exact names too
// (design.md §The provider wire, "Exact names"): a register whose agent
// says "NAME", an ack whose verdict is "Accepted", a deleteAgent's "Name",
// a query's "QueryId" and a frame whose type is "TYPE" are each refused
// saying which member, and none is taken as the field it resembles —
// encoding/json had registered the agent, declined the offer, deleted the
// agent and finished the run. A thread_messages query naming "ThreadId"
// in its params is answered refused, saying so, where it was answered with
// the thread's messages.
func TestRawCaseVariantKeysInOtherFramesAreRefused(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := rawDial(t, h, 0x6d, nil)
	p.register("echo")
	id, thread := p.startRun(h, "echo")
	p.text(`{"type":"ack","runId":"` + id + `"}`)
	h.WaitStatus(id, run.Running)
	p.text(`{"type":"register","agents":[{"name":"echo","description":"raw"},{"NAME":"other","description":"raw"}]}`)
	p.text(`{"type":"register","Agents":[{"name":"other","description":"raw"}]}`)
	p.text(`{"type":"ack","runId":"` + id + `","Accepted":false}`)
	p.text(`{"type":"deleteAgent","Name":"echo"}`)
	p.text(`{"type":"query","QueryId":"q1","method":"thread_messages","params":{"threadId":"` + thread + `"}}`)
	p.text(`{"TYPE":"finish","runId":"` + id + `"}`)
	p.text(`{"type":"event","Type":"finish","runId":"` + id + `"}`)
	got := p.barrier("b")
	want := []struct{ runID, msg string }{
		{"", `register does not validate: agents[1] member "NAME" differs from "name" only in case`},
		{"", `register does not validate: member "Agents" differs from "agents" only in case`},
		{id, `ack refused: member "Accepted" differs from "accepted" only in case`},
		{"", `deleteAgent refused: member "Name" differs from "name" only in case`},
		{"", `query refused: member "QueryId" differs from "queryId" only in case`},
		{"", `frame refused: member "TYPE" differs from "type" only in case`},
		{id, `event refused: member "Type" differs from "type" only in case`},
	}
	if len(got) != len(want) {
		t.Fatalf("answered %v; want %d refusals", got, len(want))
	}
	for i, w := range want {
		if got[i]["type"] != wire.TypeError || got[i]["message"] != w.msg || (got[i]["runId"] != nil || w.runID != "") && got[i]["runId"] != w.runID {
			t.Errorf("frame %d answered %v; want an error %q naming run %q", i, got[i], w.msg, w.runID)
		}
	}
	p.text(`{"type":"query","queryId":"q2","method":"thread_messages","params":{"ThreadId":"` + thread + `"}}`)
	var qr struct{ QueryID, Error string }
	p.expect(wire.TypeQueryResult, &qr)
	if qr.QueryID != "q2" || qr.Error != `thread_messages refused: params member "ThreadId" differs from "threadId" only in case` {
		t.Errorf("a query naming params.ThreadId answered %+v; want it refused naming the member", qr)
	}
	// Nothing was taken: the run is still running and its agent still
	// served, so the run completes on this link.
	if r := h.Run(id); r.Status != run.Running {
		t.Fatalf("the run is %s (%s) after frames naming no field exactly", r.Status, r.FailureReason)
	}
	rawComplete(p, id, thread)
	h.WaitStatus(id, run.Completed)
	if q := h.Quality(p.key); charges(q) != 0 {
		t.Errorf("counted %+v", q)
	}
}
