package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/wire"
)

// rawProv is a provider that is not our SDK: it speaks wire v4 itself and
// behaves differently on purpose, each way seeded — it acks late or not at
// all (its first event claims the run, the late-ack rule, D15), sends its
// events in bursts, keeps writing to a link until that link's read fails
// (after a failover: to the old leader's socket until it closes), waits a
// while before it reconnects, and then resends every event of every run it
// holds or finished lately with its own seq (D7) and the finish again.
// It never declines: it declares no limit.
//
// With pauses set, each run's first round ends paused on an interrupt (q1)
// and the offer carrying the answer starts its second round, numbered from
// seq 1 again. A paused round whose RUN_FINISHED was written is resent on
// a new link before register, with its finish, as design.md §D7 asks of a
// provider that cannot tell whether funduq had it (a registered link's
// report would be taken for the answer's round); every other round is
// resent after register as above.
type rawProv struct {
	signer    *identity.Signer
	base      string
	funduqKey string
	agent     string

	ackMode   string // "prompt", "late", "none"
	ackDelay  time.Duration
	burst     int
	gap       time.Duration
	reconnect time.Duration
	events    int // content events per run
	pauses    bool

	mu     sync.Mutex
	cond   *sync.Cond
	cur    *rawLink // nil between links
	runs   map[string]*rawRun
	offers map[string]int // run frames received per run
	errs   []string       // error frames received
	odd    []string       // offers that fit no round of the run
	stop   bool
	links  int // links opened
	wg     sync.WaitGroup
}

type rawRun struct {
	id, thread string
	script     [][]byte // the events, in order; seq i+1
	sent       int      // events written to some link
	finished   bool     // finish written to some link
	paused     bool     // this round ends on an interrupt
	past       [][]byte // the earlier rounds' events
	answers    int      // offers carrying the answer that began a round
}

type rawLink struct {
	ws   *websocket.Conn
	wmu  sync.Mutex
	dead chan struct{}
	once sync.Once
}

func (l *rawLink) kill() { l.once.Do(func() { close(l.dead); _ = l.ws.Close() }) }

func newRawProv(s *identity.Signer, base, funduqKey, agent string, rng *rand.Rand) *rawProv {
	p := &rawProv{signer: s, base: base, funduqKey: funduqKey, agent: agent,
		ackMode:   []string{"prompt", "late", "none"}[rng.IntN(3)],
		ackDelay:  time.Duration(rng.IntN(400)) * time.Millisecond,
		burst:     1 + rng.IntN(4),
		gap:       time.Duration(10+rng.IntN(60)) * time.Millisecond,
		reconnect: time.Duration(rng.IntN(700)) * time.Millisecond,
		events:    2 + rng.IntN(5),
		runs:      map[string]*rawRun{}, offers: map[string]int{}}
	p.cond = sync.NewCond(&p.mu)
	return p
}

func (p *rawProv) String() string {
	return fmt.Sprintf("raw provider (ack %s after %v, bursts of %d every %v, reconnects after %v, %d content events)",
		p.ackMode, p.ackDelay, p.burst, p.gap, p.reconnect, p.events)
}

// start connects and keeps a link until close.
func (p *rawProv) start() {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for first := true; ; first = false {
			if !first {
				time.Sleep(p.reconnect)
			}
			var l *rawLink
			for {
				p.mu.Lock()
				stop := p.stop
				p.mu.Unlock()
				if stop {
					return
				}
				var err error
				if l, err = p.connect(); err == nil {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			p.serve(l)
		}
	}()
}

func (p *rawProv) close() {
	p.mu.Lock()
	p.stop = true
	l := p.cur
	p.cond.Broadcast()
	p.mu.Unlock()
	if l != nil {
		l.kill()
	}
	p.wg.Wait()
}

var rawHTTP = &http.Client{Timeout: 3 * time.Second}

func (p *rawProv) connect() (*rawLink, error) {
	resp, err := rawHTTP.Post(p.base+"/tickets", "application/json", strings.NewReader(`{"publicKey":"`+p.signer.PublicKeyHex()+`"}`))
	if err != nil {
		return nil, err
	}
	var tr wire.TicketResponse
	_ = json.NewDecoder(resp.Body).Decode(&tr)
	resp.Body.Close()
	if resp.StatusCode != 201 || tr.FunduqPublicKey != p.funduqKey {
		return nil, fmt.Errorf("tickets: %d", resp.StatusCode)
	}
	d := websocket.Dialer{HandshakeTimeout: 3 * time.Second}
	ws, resp, err := d.Dial("ws"+strings.TrimPrefix(p.base, "http")+"/ws/provider", nil)
	if err != nil {
		if resp != nil {
			resp.Body.Close()
		}
		return nil, err
	}
	l := &rawLink{ws: ws, dead: make(chan struct{})}
	nonce := fmt.Sprintf("%032x", time.Now().UnixNano())
	v := wire.Version
	if !p.write(l, wire.Hello{Type: wire.TypeHello, Version: &v, PublicKey: p.signer.PublicKeyHex(), Ticket: tr.Ticket, Nonce: nonce,
		Proof: p.signer.Sign(identity.ProviderConnectPayload(tr.FunduqPublicKey, tr.Ticket, nonce))}) {
		l.kill()
		return nil, fmt.Errorf("hello not written")
	}
	_ = ws.SetReadDeadline(time.Now().Add(3 * time.Second))
	for _, want := range []string{wire.TypeWelcome, wire.TypeRegistered} {
		_, data, err := ws.ReadMessage()
		// A paused round resent before register may be refused ("unknown
		// run": the run paused already or was answered, design.md §D7).
		for err == nil && want == wire.TypeRegistered {
			if typ, _ := wire.PeekType(data); typ != wire.TypeError {
				break
			}
			p.mu.Lock()
			p.errs = append(p.errs, string(data))
			p.mu.Unlock()
			_, data, err = ws.ReadMessage()
		}
		if err != nil {
			l.kill()
			return nil, err
		}
		if typ, _ := wire.PeekType(data); typ != want {
			l.kill()
			return nil, fmt.Errorf("got %s, want %s: %s", typ, want, data)
		}
		if want == wire.TypeWelcome {
			p.resendPaused(l)
			p.write(l, wire.Register{Type: wire.TypeRegister, Agents: []wire.Registration{{Name: p.agent}}})
		}
	}
	_ = ws.SetReadDeadline(time.Time{})
	return l, nil
}

func (p *rawProv) write(l *rawLink, v any) bool {
	b, _ := json.Marshal(v)
	l.wmu.Lock()
	defer l.wmu.Unlock()
	_ = l.ws.SetWriteDeadline(time.Now().Add(5 * time.Second))
	return l.ws.WriteMessage(websocket.TextMessage, b) == nil
}

// serve reads one link until it fails. On a new link it first resends what
// it holds: every run's events so far (each with its seq) and the finish of
// each one it finished.
func (p *rawProv) serve(l *rawLink) {
	// Resend before the link becomes current: the broker drops an event
	// whose seq is not above the run's last (D7), so a script's next burst
	// must not overtake the resend.
	p.mu.Lock()
	p.links++
	var resend []*rawRun
	for _, r := range p.runs {
		if !r.paused || !r.finished { // a paused round went before register
			resend = append(resend, r)
		}
	}
	p.mu.Unlock()
	for _, r := range resend {
		p.mu.Lock()
		n, fin := r.sent, r.finished
		p.mu.Unlock()
		for i := 0; i < n; i++ {
			seq := int64(i + 1)
			p.write(l, wire.Event{Type: wire.TypeEvent, RunID: r.id, Event: r.script[i], ProviderSeq: &seq})
		}
		if fin {
			p.write(l, wire.Finish{Type: wire.TypeFinish, RunID: r.id})
		}
	}
	p.mu.Lock()
	p.cur = l
	p.cond.Broadcast()
	p.mu.Unlock()
	for {
		_, data, err := l.ws.ReadMessage()
		if err != nil {
			break
		}
		typ, _ := wire.PeekType(data)
		switch typ {
		case wire.TypeRun:
			var f wire.RunFrame
			if json.Unmarshal(data, &f) == nil {
				p.offered(l, f)
			}
		case wire.TypeError:
			p.mu.Lock()
			p.errs = append(p.errs, string(data))
			p.mu.Unlock()
		}
	}
	p.mu.Lock()
	if p.cur == l {
		p.cur = nil
	}
	p.mu.Unlock()
	l.kill()
}

// offered answers a run frame: a run it already holds (offered again after
// a takeover, D7) is accepted again and carries on, or, when it finished
// that round, is sent the round again; a new one gets its script.
func (p *rawProv) offered(l *rawLink, f wire.RunFrame) {
	var in struct {
		Resume json.RawMessage `json:"resume"`
	}
	_ = json.Unmarshal(f.RunInput, &in)
	answer := len(in.Resume) > 0 && string(in.Resume) != "null"
	p.mu.Lock()
	p.offers[f.RunID]++
	r, known := p.runs[f.RunID]
	switch {
	case !known && answer:
		p.odd = append(p.odd, f.RunID+": an answer's round offered for a run never offered before")
		p.mu.Unlock()
		return
	case !known:
		thread := ""
		if f.ThreadID != nil {
			thread = *f.ThreadID
		}
		r = &rawRun{id: f.RunID, thread: thread, paused: p.pauses}
		r.script = rawRound(thread, f.RunID, 1, p.events, r.paused)
		p.runs[f.RunID] = r
	case answer && r.paused:
		if !r.finished {
			p.odd = append(p.odd, f.RunID+": answered before its paused round's finish was written")
		}
		r.answers++
		r.past = append(r.past, r.script...)
		r.script = rawRound(r.thread, r.id, 2, p.events, false)
		r.sent, r.finished, r.paused = 0, false, false
		known = false
	case answer != (len(r.past) > 0):
		p.odd = append(p.odd, fmt.Sprintf("%s: offered again with answer %v in round %d", f.RunID, answer, 1+min(len(r.past), 1)))
	}
	// A round offered again that it finished is answered from its frames
	// (as our SDK does): funduq may have stored none of them (written to
	// a leader that refused them as it went away).
	var again []any
	if known && r.finished {
		for i, ev := range r.script {
			seq := int64(i + 1)
			again = append(again, wire.Event{Type: wire.TypeEvent, RunID: r.id, Event: ev, ProviderSeq: &seq})
		}
		again = append(again, wire.Finish{Type: wire.TypeFinish, RunID: r.id})
	}
	p.mu.Unlock()
	if known {
		p.write(l, wire.Ack{Type: wire.TypeAck, RunID: f.RunID})
		for _, fr := range again {
			p.write(l, fr)
		}
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		switch p.ackMode {
		case "prompt":
			p.write(l, wire.Ack{Type: wire.TypeAck, RunID: f.RunID})
		case "late":
			time.Sleep(p.ackDelay)
			p.write(l, wire.Ack{Type: wire.TypeAck, RunID: f.RunID})
		}
		p.script(r)
	}()
}

func (r *rawRun) answersOr() any {
	if r == nil {
		return "no run, so no"
	}
	return r.answers
}

// rawRound is the events of a run's round n, ending paused on interrupt q1
// or finished.
func rawRound(thread, id string, n, events int, paused bool) [][]byte {
	msg := fmt.Sprintf("m%d", n)
	evs := [][]byte{fmt.Appendf(nil, `{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, id),
		fmt.Appendf(nil, `{"type":"TEXT_MESSAGE_START","messageId":%q,"role":"assistant"}`, msg)}
	for i := range events {
		evs = append(evs, fmt.Appendf(nil, `{"type":"TEXT_MESSAGE_CONTENT","messageId":%q,"delta":"raw-%d "}`, msg, i))
	}
	evs = append(evs, fmt.Appendf(nil, `{"type":"TEXT_MESSAGE_END","messageId":%q}`, msg))
	if paused {
		return append(evs, fmt.Appendf(nil, `{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[{"id":"q1","reason":"confirm"}]}}`, thread, id))
	}
	return append(evs, fmt.Appendf(nil, `{"type":"RUN_FINISHED","threadId":%q,"runId":%q}`, thread, id))
}

// resendPaused writes, on a link not yet registered, every paused round
// whose RUN_FINISHED was written, its finish written or not: its events
// with their seq, then the finish (design.md §D7: funduq may have paused
// the run on that event at the lost link and an answer reopened it since,
// so sent after register the round would be taken for the answer's).
func (p *rawProv) resendPaused(l *rawLink) {
	p.mu.Lock()
	var frames []any
	for _, r := range p.runs {
		if !r.paused || !r.finished && r.sent < len(r.script) {
			continue
		}
		r.sent, r.finished = len(r.script), true // its finish is written here
		for i, ev := range r.script {
			seq := int64(i + 1)
			frames = append(frames, wire.Event{Type: wire.TypeEvent, RunID: r.id, Event: ev, ProviderSeq: &seq})
		}
		frames = append(frames, wire.Finish{Type: wire.TypeFinish, RunID: r.id})
	}
	p.mu.Unlock()
	for _, f := range frames {
		p.write(l, f)
	}
}

// script sends r's events in bursts to whichever link is current, and then
// its finish.
func (p *rawProv) script(r *rawRun) {
	for {
		p.mu.Lock()
		for p.cur == nil && !p.stop {
			p.cond.Wait()
		}
		if p.stop {
			p.mu.Unlock()
			return
		}
		l := p.cur
		if r.finished { // a paused round whose finish went before a register
			p.mu.Unlock()
			return
		}
		if r.sent == len(r.script) {
			r.finished = true
			p.mu.Unlock()
			p.write(l, wire.Finish{Type: wire.TypeFinish, RunID: r.id})
			return
		}
		from := r.sent
		to := min(from+p.burst, len(r.script))
		r.sent = to
		p.mu.Unlock()
		// A write to a link that is going away is not an error here: the
		// next link resends everything with its seq.
		for i := from; i < to; i++ {
			seq := int64(i + 1)
			p.write(l, wire.Event{Type: wire.TypeEvent, RunID: r.id, Event: r.script[i], ProviderSeq: &seq})
		}
		time.Sleep(p.gap)
	}
}

// done reports whether every run it was offered has had its finish written.
func (p *rawProv) done() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.runs {
		if !r.finished {
			return false
		}
	}
	return true
}

func (p *rawProv) expected(id string) ([][]byte, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.runs[id]
	if !ok {
		return nil, false
	}
	return append(slices.Clip(r.past), r.script...), true
}

// dropLink drops the current link without a close frame, as a transport
// failure does (D5: the link grace), and the provider reconnects as usual.
func (p *rawProv) dropLink() bool {
	p.mu.Lock()
	l := p.cur
	p.mu.Unlock()
	if l == nil {
		return false
	}
	l.kill()
	return true
}
