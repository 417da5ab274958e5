package lease_test

import (
	"bytes"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// silencingProxy forwards loopback connections to Redis at target. cut
// silences every forwarded connection that has subscribed: its Redis side
// is closed (Redis drops the subscriber) while its client side stays open
// and hears nothing more, as when a NAT or a load balancer forgets an
// idle connection, or Redis restarts behind one, without telling the
// client. New connections are forwarded as before.
type silencingProxy struct {
	ln   net.Listener
	mu   sync.Mutex
	subs []*proxied
	all  []*proxied
	wg   sync.WaitGroup
	// hold: the first connection to send bytes holding it hears nothing
	// more from Redis (its command lands, the reply never comes).
	hold []byte
	lag  time.Duration // see delay
}

type proxied struct {
	client, server net.Conn
	mu             sync.Mutex
	subscribed     bool
	silenced       bool
	deaf           bool // replies from Redis are dropped
}

func newSilencingProxy(t *testing.T, target string) *silencingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &silencingProxy{ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			pc := &proxied{client: c, server: s}
			p.mu.Lock()
			p.all = append(p.all, pc)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); p.up(pc) }()
			go func() { defer p.wg.Done(); p.down(pc) }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, pc := range p.all {
			pc.client.Close()
			pc.server.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *silencingProxy) addr() string { return p.ln.Addr().String() }

// up forwards client to server, noting a subscription and swallowing
// what a silenced client sends.
func (p *silencingProxy) up(pc *proxied) {
	buf := make([]byte, 4096)
	for {
		n, err := pc.client.Read(buf)
		if err != nil {
			pc.server.Close()
			return
		}
		pc.mu.Lock()
		silenced := pc.silenced
		if !pc.subscribed && bytes.Contains(bytes.ToLower(buf[:n]), []byte("subscribe")) {
			pc.subscribed = true
			p.mu.Lock()
			p.subs = append(p.subs, pc)
			p.mu.Unlock()
		}
		p.mu.Lock()
		if p.hold != nil && bytes.Contains(bytes.ToLower(buf[:n]), p.hold) {
			p.hold = nil
			pc.deaf = true
		}
		p.mu.Unlock()
		pc.mu.Unlock()
		if silenced {
			continue
		}
		if _, err := pc.server.Write(buf[:n]); err != nil {
			return
		}
	}
}

// down forwards server to client unless the connection went deaf.
func (p *silencingProxy) down(pc *proxied) {
	buf := make([]byte, 4096)
	for {
		n, err := pc.server.Read(buf)
		if err != nil {
			return
		}
		pc.mu.Lock()
		deaf := pc.deaf
		pc.mu.Unlock()
		if deaf {
			continue
		}
		p.mu.Lock()
		lag := p.lag
		p.mu.Unlock()
		time.Sleep(lag) // the fault itself, not a wait for an event
		if _, err := pc.client.Write(buf[:n]); err != nil {
			return
		}
	}
}

// holdReplyTo makes the next connection to send want (lower case) deaf.
func (p *silencingProxy) holdReplyTo(want string) {
	p.mu.Lock()
	p.hold = []byte(want)
	p.mu.Unlock()
}

// cut silences every subscribed connection; it returns how many.
func (p *silencingProxy) cut() int {
	p.mu.Lock()
	subs := p.subs
	p.subs = nil
	p.mu.Unlock()
	for _, pc := range subs {
		pc.mu.Lock()
		pc.silenced = true
		pc.mu.Unlock()
		pc.server.Close() // Redis forgets the subscriber; the client is not told
	}
	return len(subs)
}

// delay holds every reply from Redis for d before passing it on (in
// order): a healthy Redis far away, or behind a slow link.
func (p *silencingProxy) delay(d time.Duration) {
	p.mu.Lock()
	p.lag = d
	p.mu.Unlock()
}

// throughProxy is a client of rdb's Redis through a silencingProxy, built
// as broker-node/node builds its client (context deadlines honoured).
func throughProxy(t *testing.T, rdb *redis.Client) (*silencingProxy, *redis.Client) {
	t.Helper()
	p := newSilencingProxy(t, rdb.Options().Addr)
	opt := *rdb.Options()
	opt.Addr = p.addr()
	opt.ContextTimeoutEnabled = true
	own := redis.NewClient(&opt)
	t.Cleanup(func() { own.Close() })
	return p, own
}
