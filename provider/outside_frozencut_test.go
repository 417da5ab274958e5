package provider_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/provider"
)

// freezer is a TCP proxy in front of a node whose links the test freezes:
// from then on nothing passes either way, and the provider's side is
// closed while funduq's stays open — a link cut somewhere funduq does not
// see, what the provider wrote since lost with it.
type freezer struct {
	ln    net.Listener
	mu    sync.Mutex
	pairs []*frozenPair
	wg    sync.WaitGroup
}

type frozenPair struct {
	in, out net.Conn
	frozen  atomic.Bool
}

func newFreezer(t *testing.T, target string) *freezer {
	t.Helper()
	f := &freezer{}
	f.ln = relayTo(t, target, &f.wg, func(in, out net.Conn) {
		p := &frozenPair{in: in, out: out}
		f.mu.Lock()
		f.pairs = append(f.pairs, p)
		f.mu.Unlock()
		f.wg.Add(2)
		go f.pipe(p, out, in)
		go f.pipe(p, in, out)
	})
	t.Cleanup(func() {
		f.ln.Close()
		f.mu.Lock()
		for _, p := range f.pairs {
			p.in.Close()
			p.out.Close()
		}
		f.mu.Unlock()
		f.wg.Wait()
	})
	return f
}

// pipe copies src to dst until the pair is frozen; then it reads src and
// drops what it reads, and a frozen pair's ends are closed only by the
// test (cut, Cleanup).
func (f *freezer) pipe(p *frozenPair, dst, src net.Conn) {
	defer f.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.frozen.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil && !p.frozen.Load() {
				src.Close()
				return
			}
		}
		if err != nil {
			if !p.frozen.Load() {
				dst.Close()
			}
			return
		}
	}
}

func (f *freezer) url() string { return "http://" + f.ln.Addr().String() }

// freeze stops every link open now: nothing more passes on it.
func (f *freezer) freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.pairs {
		p.frozen.Store(true)
	}
}

// cut closes the provider's side of the frozen links; funduq's side stays
// open, so funduq holds the link alive until it finds out otherwise.
func (f *freezer) cut() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range f.pairs {
		if p.frozen.Load() {
			p.in.Close()
		}
	}
}

// Our SDK's paused round lost with a link funduq has not seen go (design.md
// D7, "A resend read before register"): the SDK writes the round it holds
// on its next link before its register, where funduq, the run held by the
// old link, used to refuse it "held by another link" — which the SDK does
// not take as the round's confirmation, and writes it again only on a
// later link — and the register then passed the run to the new link with
// nothing stored: running for good, its question never asked. funduq keeps
// the round for the register, which passes the run to the new link: the
// run pauses on the whole round, and its answer completes it.
func TestOutsidePausedRoundLostWithALinkFunduqStillHolds(t *testing.T) {
	h := nodetest.Start(t, func(c *config.Broker) { c.LinkGrace = 5 * time.Second })
	proxy := newFreezer(t, strings.TrimPrefix(h.URL, "http://"))
	srv := aguiDoor(t, h)
	s := outsideSigner(t, 0x9e)
	entered, emit, returned := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	cfg := outsideConfig(h, s, nil, provider.Agent{Name: "ask", Handler: func(ctx context.Context, r *provider.Run) error {
		var in struct {
			Resume json.RawMessage `json:"resume"`
		}
		_ = json.Unmarshal(r.Input, &in)
		if calls.Add(1) > 1 {
			if len(in.Resume) == 0 || string(in.Resume) == "null" {
				return fmt.Errorf("called again without the answer: %s", r.Input)
			}
			if err := started(ctx, r); err != nil {
				return err
			}
			return finished(ctx, r)
		}
		defer close(returned)
		close(entered)
		<-emit
		if err := started(ctx, r); err != nil {
			return err
		}
		return r.Emit(ctx, map[string]any{"type": "RUN_FINISHED", "threadId": r.ThreadID, "runId": r.ID,
			"outcome": map[string]any{"type": "interrupt", "interrupts": []any{map[string]any{"id": "q1", "reason": "confirm"}}}})
	}})
	cfg.BaseURL = proxy.url()
	c, err := provider.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	serve(t, c)
	id, thread := h.Door(s.PublicKeyHex(), "ask", "", "q")
	<-entered
	h.WaitStatus(id, run.Running) // claimed by the first link
	proxy.freeze()
	close(emit) // the round goes nowhere
	<-returned
	proxy.cut()
	h.EventuallyExplained("the run pauses on the resent round", func() bool { return h.Run(id).Status == run.InputRequired },
		func() string { return h.DescribeRun(id) })
	url := srv.URL + "/agui/" + s.PublicKeyHex() + "/ask"
	postAGUI(t, url, fmt.Sprintf(`{"threadId":%q,"runId":"r-answer","state":{},"messages":[],"tools":[],"context":[],"forwardedProps":{},"resume":[{"interruptId":"q1","status":"resolved","payload":"yes"}]}`, thread))
	h.WaitStatus(id, run.Completed)
	var got []string
	for _, e := range h.Events(id) {
		got = append(got, fmt.Sprint(e["type"]))
	}
	if want := "RUN_STARTED RUN_FINISHED RUN_STARTED RUN_FINISHED"; strings.Join(got, " ") != want {
		t.Fatalf("stored %v, want %s", got, want)
	}
}
