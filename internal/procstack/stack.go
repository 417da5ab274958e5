package procstack

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// Stack owns the processes and balancers it starts; Close stops them.
type Stack struct {
	cfg  Config
	http *http.Client

	mu        sync.Mutex
	closed    bool
	current   []*Proc // the live incarnation of each name, in start order
	all       []*Proc // every incarnation ever started
	balancers []*Balancer
	sdks      []*SDK
}

// New validates cfg and returns a Stack with nothing started yet.
func New(cfg Config) (*Stack, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Stack{cfg: cfg.withDefaults(), http: &http.Client{}}, nil
}

// Config is the validated configuration, defaults applied.
func (s *Stack) Config() Config { return s.cfg }

// StartBroker starts a broker node named name (FUNDUQ_NODE_ID) and
// returns once it answers /livez; it leads only once it holds the lease
// (WaitLeader). env is appended to its environment.
func (s *Stack) StartBroker(ctx context.Context, name string, env ...string) (*Proc, error) {
	return s.Start(ctx, Spec{Name: name, Kind: KindBroker, Path: s.cfg.Binaries.Broker,
		Env: append([]string{"FUNDUQ_NODE_ID=" + name}, env...), AddrEnv: "FUNDUQ_HTTP_ADDR", Ready: "/livez"})
}

// StartDoor starts a local doors server and returns once /health is 200.
func (s *Stack) StartDoor(ctx context.Context, name string, env ...string) (*Proc, error) {
	return s.Start(ctx, Spec{Name: name, Kind: KindDoor, Path: s.cfg.Binaries.Doors, Env: env,
		AddrEnv: "FUNDUQ_DOORS_ADDR", Ready: "/health"})
}

// Start starts spec's process and returns once it is ready (spec.Ready
// answers 200), bounded by ctx and Config.Boot. A process that exits or
// is not ready in time is killed and reported as a *ProcError.
func (s *Stack) Start(ctx context.Context, spec Spec) (*Proc, error) {
	if spec.Name == "" || spec.Path == "" {
		return nil, &ConfigError{Field: "Spec", Problem: "needs Name and Path (is the binary in Config.Binaries?)"}
	}
	return s.start(ctx, spec, 1)
}

// Restart starts old's spec again as its next incarnation, on a new port,
// in old's place among the current processes. old must have exited.
func (s *Stack) Restart(ctx context.Context, old *Proc) (*Proc, error) {
	if old.Alive() {
		return nil, fmt.Errorf("restart %s: %w", old, ErrRunning)
	}
	return s.start(ctx, old.spec, old.Incarnation+1)
}

func (s *Stack) start(ctx context.Context, spec Spec, inc int) (*Proc, error) {
	logName := spec.Name + ".log"
	if inc > 1 {
		logName = fmt.Sprintf("%s.%d.log", spec.Name, inc)
	}
	p := &Proc{Name: spec.Name, Kind: spec.Kind, LogPath: filepath.Join(s.cfg.LogDir, logName),
		Incarnation: inc, spec: spec, done: make(chan struct{})}
	fail := func(op string, err error) (*Proc, error) {
		return nil, &ProcError{Proc: p.String(), Op: op, Log: p.LogPath, Err: err}
	}
	args := append([]string(nil), spec.Args...)
	env := append(s.cfg.baseEnv(), spec.Env...)
	if spec.AddrEnv != "" || spec.AddrFlag != "" {
		addr, err := freeAddr()
		if err != nil {
			return fail("start", err)
		}
		p.URL = "http://" + addr
		if spec.AddrEnv != "" {
			env = append(env, spec.AddrEnv+"="+addr)
		}
		if spec.AddrFlag != "" {
			args = append(args, spec.AddrFlag, addr)
		}
	}
	f, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fail("start", err)
	}
	var out io.Writer = f
	if s.cfg.Echo != nil {
		out = io.MultiWriter(f, s.cfg.Echo)
	}
	// Not CommandContext: the process outlives this call; Close ends it.
	cmd := exec.Command(spec.Path, args...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, out, out
	p.cmd = cmd
	// Registered before it runs, so that Close never misses a process.
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		f.Close()
		return fail("start", ErrClosed)
	}
	for _, q := range s.current {
		if q.Name == p.Name && q.Alive() {
			s.mu.Unlock()
			f.Close()
			return nil, &ConfigError{Field: "Spec.Name", Problem: p.Name + " is already running"}
		}
	}
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		f.Close()
		return fail("start", err)
	}
	s.all = append(s.all, p)
	replaced := false
	for i, q := range s.current {
		if q.Name == p.Name {
			s.current[i], replaced = p, true
		}
	}
	if !replaced {
		s.current = append(s.current, p)
	}
	s.mu.Unlock()
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
	if spec.Ready == "" {
		return p, nil
	}
	if err := s.waitReady(ctx, p, spec.Ready); err != nil {
		p.stop(0)
		return fail("ready", err)
	}
	return p, nil
}

// waitReady polls p's path until it answers 200, p exits, or the bound.
func (s *Stack) waitReady(ctx context.Context, p *Proc, path string) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Boot)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if code, err := s.get(ctx, p.URL+path); err != nil {
			last = err
		} else if code == http.StatusOK {
			return nil
		} else {
			last = fmt.Errorf("%s answered %d", path, code)
		}
		select {
		case <-p.done:
			return ErrExited
		case <-ctx.Done():
			return fmt.Errorf("%s not 200: %w (last: %v)", path, context.Cause(ctx), last)
		case <-tick.C:
		}
	}
}

func (s *Stack) get(ctx context.Context, u string) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ProbeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// Procs is every incarnation started, in start order.
func (s *Stack) Procs() []*Proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Proc(nil), s.all...)
}

// Current is the latest incarnation of each name, in start order.
func (s *Stack) Current() []*Proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Proc(nil), s.current...)
}

// Of is the current processes of kind k.
func (s *Stack) Of(k Kind) []*Proc {
	var out []*Proc
	for _, p := range s.Current() {
		if p.Kind == k {
			out = append(out, p)
		}
	}
	return out
}

// Readyz is a broker node's /readyz answer.
type Readyz struct {
	Status int    `json:"-"`
	Role   string `json:"role"` // "leader" or "standby"
	Epoch  int64  `json:"epoch"`
	Leader string `json:"leader"`
	Node   string `json:"node"`
}

// Readyz asks broker p who leads, within Config.ProbeTimeout.
func (s *Stack) Readyz(ctx context.Context, p *Proc) (Readyz, error) {
	var r Readyz
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ProbeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/readyz", nil)
	if err != nil {
		return r, err
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	r.Status = resp.StatusCode
	err = json.NewDecoder(resp.Body).Decode(&r)
	return r, err
}

// Leader is the live, unfrozen broker node whose /readyz is 200 with the
// role leader, or nil.
func (s *Stack) Leader(ctx context.Context) *Proc {
	for _, p := range s.Of(KindBroker) {
		if !p.Alive() || p.Frozen() {
			continue
		}
		if r, err := s.Readyz(ctx, p); err == nil && r.Status == http.StatusOK && r.Role == "leader" {
			return p
		}
	}
	return nil
}

// WaitLeader polls until a broker node other than those in not leads,
// and returns it; when ctx ends first, an error wrapping ErrNoLeader.
func (s *Stack) WaitLeader(ctx context.Context, not ...*Proc) (*Proc, error) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if l := s.Leader(ctx); l != nil && !contains(not, l) {
			return l, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", ErrNoLeader, context.Cause(ctx))
		case <-tick.C:
		}
	}
}

func contains(ps []*Proc, p *Proc) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

// Close closes the balancers, stops the SDK providers, then stops every
// process (see the package comment) and returns once all have exited. Start fails with ErrClosed
// from the moment Close begins.
func (s *Stack) Close() {
	s.mu.Lock()
	s.closed = true
	bs, sdks, all := s.balancers, s.sdks, append([]*Proc(nil), s.all...)
	s.balancers, s.sdks = nil, nil
	s.mu.Unlock()
	for _, b := range bs {
		b.Close()
	}
	for _, p := range sdks {
		_ = p.Stop(context.Background()) // Run returns once cancelled
	}
	var wg sync.WaitGroup
	for _, p := range all {
		wg.Add(1)
		go func() { defer wg.Done(); p.stop(s.cfg.StopGrace) }()
	}
	wg.Wait()
}

// freeAddr is a loopback address nobody listens on now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return "127.0.0.1:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port), nil
}
