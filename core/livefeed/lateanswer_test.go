package livefeed_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/core/livefeed"
	"github.com/funduq/funduq-go/core/redistest"
)

// A Redis that answers a read after the reader's bound (block +
// ReadSlack) has passed: the read fails, and the late answer is never
// taken for a later read's — on a client with one connection, with no
// read timeout of its own — so the reader's next read from the same seq
// gets every event after it once, in order: a timed-out read loses and
// repeats nothing.
func TestLateAnswerIsNotALaterReadsAnswer(t *testing.T) {
	direct, prefix := redistest.Client(t)
	gate := newLateProxy(t, direct.Options().Addr)
	opt, err := redis.ParseURL(redistest.URL())
	if err != nil {
		t.Fatal(err)
	}
	opt.Addr, opt.PoolSize, opt.ReadTimeout, opt.MaxRetries = gate.addr, 1, -1, -1
	opt.ContextTimeoutEnabled = true // as door.Connect sets it
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	pub, f := livefeed.New(direct, prefix), livefeed.New(rdb, prefix)
	ctx := context.Background()
	if err := pub.Publish(ctx, "run_1", 1, json.RawMessage(`{"type":"CUSTOM","n":1}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Read(ctx, "run_1", 0, 0); err != nil { // the connection is made
		t.Fatal(err)
	}

	gate.hold()
	if got, err := f.Read(ctx, "run_1", 0, 10*time.Millisecond); err == nil {
		t.Fatalf("a read Redis answered past its bound returned %+v", got)
	}
	gate.release() // the held answer (event 1) reaches the client now
	if err := pub.Publish(ctx, "run_1", 2, json.RawMessage(`{"type":"CUSTOM","n":2}`)); err != nil {
		t.Fatal(err)
	}
	got, err := f.Read(ctx, "run_1", 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Seq != 2 {
		t.Fatalf("read after 1 once a late answer came: %+v, want event 2 alone", got)
	}
	got, err = f.Read(ctx, "run_1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Seq != 1 || got[1].Seq != 2 {
		t.Fatalf("read after 0: %+v, want events 1 and 2", got)
	}
}

// lateProxy forwards TCP to a Redis; while held, what Redis answers is
// kept back and sent on at release.
type lateProxy struct {
	addr string
	mu   sync.Mutex
	cond *sync.Cond
	held bool
}

func newLateProxy(t *testing.T, upstream string) *lateProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &lateProxy{addr: ln.Addr().String()}
	p.cond = sync.NewCond(&p.mu)
	var wg sync.WaitGroup
	var conns []net.Conn
	var cmu sync.Mutex
	t.Cleanup(func() {
		_ = ln.Close()
		p.release()
		cmu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		cmu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				_ = c.Close()
				continue
			}
			cmu.Lock()
			conns = append(conns, c, u)
			cmu.Unlock()
			wg.Go(func() { _, _ = io.Copy(u, c); _ = u.Close() })
			wg.Go(func() {
				buf := make([]byte, 32<<10)
				for {
					n, err := u.Read(buf)
					if n > 0 {
						p.mu.Lock()
						for p.held {
							p.cond.Wait()
						}
						p.mu.Unlock()
						if _, werr := c.Write(buf[:n]); werr != nil {
							break
						}
					}
					if err != nil {
						if !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.EOF) {
							t.Logf("late proxy: %v", err)
						}
						break
					}
				}
				_ = c.Close()
			})
		}
	})
	return p
}

func (p *lateProxy) hold() {
	p.mu.Lock()
	p.held = true
	p.mu.Unlock()
}

func (p *lateProxy) release() {
	p.mu.Lock()
	p.held = false
	p.cond.Broadcast()
	p.mu.Unlock()
}
