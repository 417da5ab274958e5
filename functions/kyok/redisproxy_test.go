package kyok_test

import (
	"bytes"
	"net"
	"sync"
	"testing"
)

// redisProxy stands between a client and the real Redis and can hang
// it: once hung, every connection — open or new — is kept open and
// nothing more passes either way (a Redis frozen, or a route black-holed,
// mid-conversation). release closes the listener and every connection,
// so a client stuck on the hung Redis is let go when the test ends.
type redisProxy struct {
	t      *testing.T
	ln     net.Listener
	target string

	mu      sync.Mutex
	conns   []net.Conn
	hung    chan struct{} // closed by hang
	reached chan struct{} // closed when a client connects to the hung proxy
	reachMu sync.Once
	hangOn  []byte // hang once Redis has answered bytes holding this
	hangNow sync.Once
	done    chan struct{}
	wg      sync.WaitGroup
	relOnce sync.Once
}

func newRedisProxy(t *testing.T, target string) *redisProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &redisProxy{t: t, ln: ln, target: target, hung: make(chan struct{}), reached: make(chan struct{}), done: make(chan struct{})}
	go p.accept()
	t.Cleanup(p.release)
	return p
}

func (p *redisProxy) addr() string { return p.ln.Addr().String() }

// hang stops all traffic from now on.
func (p *redisProxy) hang() { p.hangNow.Do(func() { close(p.hung) }) }

// hangAfter hangs the proxy right after it has passed on an answer from
// Redis holding s (a reply the door has then read, say).
func (p *redisProxy) hangAfter(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hangOn = []byte(s)
}

func (p *redisProxy) isHung() bool {
	select {
	case <-p.hung:
		return true
	default:
		return false
	}
}

func (p *redisProxy) accept() {
	defer close(p.done)
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.conns = append(p.conns, c)
		p.mu.Unlock()
		if p.isHung() {
			p.reachMu.Do(func() { close(p.reached) })
			continue // accepted, never answered
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, up)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(up, c, false)
		go p.pipe(c, up, true)
	}
}

// pipe copies src to dst until either closes, holding whatever it reads
// once the proxy is hung.
func (p *redisProxy) pipe(dst, src net.Conn, fromRedis bool) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		if p.isHung() {
			return // held: the connection stays open, nothing passes
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
		if fromRedis {
			p.mu.Lock()
			on := p.hangOn
			p.mu.Unlock()
			if on != nil && bytes.Contains(buf[:n], on) {
				p.hang()
			}
		}
	}
}

func (p *redisProxy) release() {
	p.relOnce.Do(func() {
		p.ln.Close()
		<-p.done
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
}
