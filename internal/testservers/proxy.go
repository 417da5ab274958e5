package testservers

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy forwards TCP connections to a server until the test freezes it:
// from then on no byte passes either way, on the connections open and on
// those accepted later, which stay open — a server that hangs mid-session
// (frozen, or behind a black-holed route) rather than one that refuses, on
// connections a client already pooled. Unlike Postgres.Freeze it freezes
// one client's view only, so it serves over the shared test servers.
type Proxy struct {
	// Addr is the proxy's host:port.
	Addr string

	target string
	ln     net.Listener
	frozen atomic.Bool

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
	once  sync.Once
}

// NewProxy forwards to target (host:port); it is closed when the test
// ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Addr: ln.Addr().String(), target: target, ln: ln, conns: []net.Conn{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Freeze stops every byte from now on; nothing thaws it.
func (p *Proxy) Freeze() { p.frozen.Store(true) }

// keep records c for Close; false when the proxy is closing.
func (p *Proxy) keep(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return false
	}
	p.conns = append(p.conns, c)
	return true
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.keep(c) {
			c.Close()
			return
		}
		if p.frozen.Load() {
			// Accepted, never answered: read what the client sends.
			p.wg.Add(1)
			go p.pump(nil, c, c)
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		if !p.keep(s) {
			s.Close()
			c.Close()
			return
		}
		p.wg.Add(2)
		go p.pump(s, c, s)
		go p.pump(c, s, c)
	}
}

// pump copies src to dst (nil: nowhere) until src ends, dropping what it
// reads while frozen, then closes src and peer, its pair's other end.
func (p *Proxy) pump(dst, src, peer net.Conn) {
	defer p.wg.Done()
	defer src.Close()
	defer peer.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && dst != nil && !p.frozen.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Close stops the proxy and closes every connection: a client waiting on
// it gets an error at once.
func (p *Proxy) Close() {
	p.once.Do(func() {
		p.ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.conns = nil
		p.mu.Unlock()
		p.wg.Wait()
	})
}
