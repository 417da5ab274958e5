package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
	"time"
)

// gate is a TCP proxy in front of one node's dependency (its PostgreSQL, its
// Redis) or of the node itself (its provider links). The chaos test takes a
// leader away through its gates, since a goroutine cannot be SIGKILLed:
// freeze stops every byte both ways and holds the sockets (a frozen process:
// nothing is read, nothing closes, writes pile up), thaw lets them flow
// again, and cut closes every connection and refuses new ones (a dead host:
// a provider sees its link drop without a close frame).
type gate struct {
	ln     net.Listener
	mu     sync.Mutex
	cond   *sync.Cond
	target string
	frozen bool
	cut    bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func newGate(t testing.TB, target string) *gate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	g.cond = sync.NewCond(&g.mu)
	g.wg.Add(1)
	go g.accept()
	t.Cleanup(g.close)
	return g
}

func (g *gate) addr() string { return g.ln.Addr().String() }

func (g *gate) setTarget(hostport string) {
	g.mu.Lock()
	g.target = hostport
	g.mu.Unlock()
}

func (g *gate) accept() {
	defer g.wg.Done()
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return
		}
		g.mu.Lock()
		if g.cut {
			g.mu.Unlock()
			_ = c.Close()
			continue
		}
		target := g.target
		g.conns[c] = struct{}{}
		g.mu.Unlock()
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			up, err := net.DialTimeout("tcp", target, 2*time.Second)
			if err != nil {
				g.drop(c)
				return
			}
			g.mu.Lock()
			if g.cut {
				g.mu.Unlock()
				_ = up.Close()
				g.drop(c)
				return
			}
			g.conns[up] = struct{}{}
			g.mu.Unlock()
			var pair sync.WaitGroup
			pair.Add(2)
			go func() { defer pair.Done(); g.pipe(up, c) }()
			go func() { defer pair.Done(); g.pipe(c, up) }()
			pair.Wait()
			g.drop(c)
			g.drop(up)
		}()
	}
}

// pipe copies src to dst, each chunk waiting while the gate is frozen.
func (g *gate) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	defer func() { _ = dst.Close(); _ = src.Close() }()
	for {
		n, err := src.Read(buf)
		if n > 0 {
			g.mu.Lock()
			for g.frozen && !g.cut {
				g.cond.Wait()
			}
			cut := g.cut
			g.mu.Unlock()
			if cut {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (g *gate) drop(c net.Conn) {
	_ = c.Close()
	g.mu.Lock()
	delete(g.conns, c)
	g.mu.Unlock()
}

func (g *gate) freeze() { g.mu.Lock(); g.frozen = true; g.mu.Unlock() }

func (g *gate) thaw() {
	g.mu.Lock()
	g.frozen = false
	g.cond.Broadcast()
	g.mu.Unlock()
}

// cutAll closes every connection through the gate and refuses new ones
// until restore.
func (g *gate) cutAll() {
	g.mu.Lock()
	g.cut = true
	for c := range g.conns {
		_ = c.Close()
	}
	g.cond.Broadcast()
	g.mu.Unlock()
}

func (g *gate) restore() {
	g.mu.Lock()
	g.cut, g.frozen = false, false
	g.cond.Broadcast()
	g.mu.Unlock()
}

func (g *gate) close() {
	_ = g.ln.Close()
	g.cutAll()
	g.wg.Wait()
}

// withHost is u with its host:port replaced.
func withHost(t testing.TB, raw, hostport string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = hostport
	return u.String()
}

func hostOf(t testing.TB, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// leaderBalancer stands in for a deployment's load balancer in front of the
// broker nodes: each request goes to the first node whose /readyz answers
// 200 within a short probe (a frozen node does not), through that node's
// front gate, or to the first node's when none does.
type balanced struct {
	ready func() bool // the node's own /readyz, probed directly
	front string      // its front gate's URL
}

func leaderBalancer(t testing.TB, nodes ...balanced) string {
	t.Helper()
	tr := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pick := nodes[0].front
		for _, n := range nodes {
			if n.ready() {
				pick = n.front
				break
			}
		}
		target, _ := url.Parse(pick)
		rp := httputil.NewSingleHostReverseProxy(target)
		rp.Transport = tr
		rp.ErrorLog = nil
		rp.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(http.StatusBadGateway) }
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}
