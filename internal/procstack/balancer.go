package procstack

import (
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
)

// Balancer stands in for the load balancer in front of the broker nodes:
// a request goes to the leader or, when nobody leads, to the first live
// broker node (a standby answers 503 naming the leader or "no leader
// yet"). WebSocket upgrades pass through. It tracks its connections so
// that CutLinks can drop every provider link at once, as when a load
// balancer node is replaced.
type Balancer struct {
	URL string

	s        *Stack
	srv      *http.Server
	served   chan struct{} // closed when Serve returns
	mu       sync.Mutex    // guards closing and handlers.Add
	closing  bool
	handlers sync.WaitGroup
	conns    sync.Map // net.Conn → struct{}
	once     sync.Once
}

// Balancer starts a balancer over the stack's broker nodes; the stack
// closes it at Close, or the caller earlier with its Close.
func (s *Stack) Balancer() (*Balancer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, &ProcError{Proc: "balancer", Op: "start", Err: err}
	}
	b := &Balancer{URL: "http://" + ln.Addr().String(), s: s, served: make(chan struct{})}
	b.srv = &http.Server{Handler: http.HandlerFunc(b.serve), ConnState: b.track}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return nil, &ProcError{Proc: "balancer", Op: "start", Err: ErrClosed}
	}
	s.balancers = append(s.balancers, b)
	s.mu.Unlock()
	go func() { defer close(b.served); _ = b.srv.Serve(ln) }()
	return b, nil
}

func (b *Balancer) serve(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	if b.closing {
		b.mu.Unlock()
		http.Error(w, "balancer closed", http.StatusServiceUnavailable)
		return
	}
	b.handlers.Add(1)
	b.mu.Unlock()
	defer b.handlers.Done()
	target := b.s.Leader(r.Context())
	if target == nil {
		for _, p := range b.s.Of(KindBroker) {
			if p.Alive() {
				target = p
				break
			}
		}
	}
	if target == nil {
		http.Error(w, "no broker", http.StatusBadGateway)
		return
	}
	u, _ := url.Parse(target.URL)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(http.StatusBadGateway) }
	rp.ServeHTTP(w, r)
}

func (b *Balancer) track(c net.Conn, st http.ConnState) {
	switch st {
	case http.StateNew, http.StateHijacked:
		b.conns.Store(c, struct{}{})
	case http.StateClosed:
		b.conns.Delete(c)
	}
}

// CutLinks closes every connection through the balancer and returns how
// many it closed.
func (b *Balancer) CutLinks() int {
	n := 0
	b.conns.Range(func(k, _ any) bool {
		_ = k.(net.Conn).Close()
		b.conns.Delete(k)
		n++
		return true
	})
	return n
}

// Close stops the balancer, cuts the (hijacked) links through it and
// returns once every request it was serving has returned.
func (b *Balancer) Close() {
	b.once.Do(func() {
		b.mu.Lock()
		b.closing = true
		b.mu.Unlock()
		_ = b.srv.Close()
		b.CutLinks()
		<-b.served
		b.handlers.Wait()
	})
}
