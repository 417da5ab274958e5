package intake_test

import (
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
)

// proxy forwards TCP connections to PostgreSQL. freeze makes every
// connection open at that moment silently drop all bytes both ways while
// staying open — a dead peer the kernel cannot report — and leaves later
// connections alone.
type proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	links []*link
	wg    sync.WaitGroup
}

type link struct {
	client, server net.Conn
	frozen         atomic.Bool
}

func newProxy(t *testing.T, dbURL string) *proxy {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	if u.Port() == "" {
		target = net.JoinHostPort(u.Hostname(), "5432")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		lk := &link{client: c, server: s}
		p.mu.Lock()
		p.links = append(p.links, lk)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pump(lk, s, c)
		go p.pump(lk, c, s)
	}
}

// pump copies src to dst until either side ends, dropping bytes while the
// link is frozen, then closes both sides.
func (p *proxy) pump(lk *link, dst, src net.Conn) {
	defer p.wg.Done()
	defer lk.client.Close()
	defer lk.server.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !lk.frozen.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *proxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, lk := range p.links {
		lk.frozen.Store(true)
	}
}

func (p *proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, lk := range p.links {
		lk.client.Close()
		lk.server.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
