// Command soak runs funduq as processes on this machine — two broker nodes,
// two door servers, SDK provider processes (this program in "provider"
// mode) behind a stand-in load balancer — under
// mixed AG-UI and A2A load for a while, fails the leader over on a schedule
// (alternating SIGTERM handover and SIGKILL), drops every provider link at
// once now and then (a reconnect storm, with extra providers joining), and
// reports what became of every run and how each process's goroutines and
// resident memory moved.
//
//	go run ./scripts/soak --duration 30m --out /work/soak-report.txt
//
// The processes, the balancer and the storm's in-process providers are an
// internal/procstack stack. It starts a private PostgreSQL and Redis
// (internal/testservers) unless --database-url and --redis-url are given. It is not part of the test
// command. The exit code is 0 when every run was accounted for (each run
// in the database reached a terminal or paused status, none stuck) and no
// caller saw a stream out of order; 1 otherwise.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/internal/procstack"
	"github.com/funduq/funduq-go/internal/testservers"
	"github.com/funduq/funduq-go/provider"
)

const (
	identitySeed = "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a"
	tokenSecret  = "soak-token-secret-0123456789abcdef"
	boot         = 30 * time.Second
)

type options struct {
	duration, failoverEvery, stormEvery, sampleEvery, drain time.Duration
	callers, providers, stormProviders                      int
	out, jsonOut, logDir, dbURL, redisURL                   string
	leaseTTL                                                time.Duration
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "provider" {
		os.Exit(providerMain(os.Args[2:]))
	}
	var o options
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: go run ./scripts/soak [flags]\n       (soak provider [flags]: one SDK provider process, started by the soak itself)\n\n"+
			"Soak funduq as local processes (2 broker nodes, 2 door servers, SDK providers,\n"+
			"AG-UI and A2A callers) with leader failovers and a provider reconnect storm;\n"+
			"report runs by outcome and each process's goroutines and memory over time.\n\n")
		fs.PrintDefaults()
	}
	fs.DurationVar(&o.duration, "duration", 30*time.Minute, "how long the load runs")
	fs.DurationVar(&o.failoverEvery, "failover-every", 5*time.Minute, "leader failover period (alternating SIGTERM and SIGKILL)")
	fs.DurationVar(&o.stormEvery, "storm-every", 10*time.Minute, "provider reconnect storm period (the first at half of it plus a failover half-period)")
	fs.DurationVar(&o.sampleEvery, "sample-every", time.Minute, "how often /metrics of every process is read")
	fs.DurationVar(&o.drain, "drain", 2*time.Minute, "after the load, how long runs may take to settle")
	fs.DurationVar(&o.leaseTTL, "lease-ttl", 4*time.Second, "FUNDUQ_LEASE_TTL of the broker nodes")
	fs.IntVar(&o.callers, "callers", 6, "concurrent callers")
	fs.IntVar(&o.providers, "providers", 4, "SDK providers serving the load")
	fs.IntVar(&o.stormProviders, "storm-providers", 16, "extra providers that join during a storm")
	fs.StringVar(&o.out, "out", "soak-report.txt", "the report (text)")
	fs.StringVar(&o.jsonOut, "json", "", "the report as JSON (default: --out with .json)")
	fs.StringVar(&o.logDir, "logs", "", "folder for the processes' logs (default: a new temporary folder, kept)")
	fs.StringVar(&o.dbURL, "database-url", "", "use this PostgreSQL database (migrated) instead of a private server")
	fs.StringVar(&o.redisURL, "redis-url", "", "use this Redis instead of a private server")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
	if o.jsonOut == "" {
		o.jsonOut = strings.TrimSuffix(o.out, filepath.Ext(o.out)) + ".json"
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ok, err := run(ctx, o, log)
	if err != nil {
		log.Error("soak failed", "err", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

// ---------------------------------------------------------------- processes

// stack is the soak's processes (internal/procstack) and what its callers
// and providers need of them.
type stack struct {
	*procstack.Stack
	doors     []*procstack.Proc // door servers never restart: fixed once started
	lb        *procstack.Balancer
	funduqKey string
}

// startProviderProc runs this program in provider mode: an SDK client
// serving agents(), with /metrics and /connected on its own port.
func (s *stack) startProviderProc(ctx context.Context, name string, seed byte) (*procstack.Proc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find this program: %w", err)
	}
	return s.Start(ctx, procstack.Spec{Name: name, Kind: procstack.KindProvider, Path: self,
		Args:     []string{"provider", "-seed", strconv.Itoa(int(seed)), "-broker", s.lb.URL, "-funduq-key", s.funduqKey},
		AddrFlag: "-addr", Ready: "/connected"})
}

var quick = &http.Client{Timeout: time.Second}

// waitLeader waits at most bound for a leader other than not, and says
// how long it took.
func (s *stack) waitLeader(bound time.Duration, not ...*procstack.Proc) (*procstack.Proc, time.Duration, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	l, err := s.WaitLeader(ctx, not...)
	return l, time.Since(start), err
}

// ---------------------------------------------------------------- metrics

type sample struct {
	At          time.Duration `json:"at"`
	Process     string        `json:"process"`
	Incarnation int           `json:"incarnation"`
	Goroutines  float64       `json:"goroutines"`
	RSSBytes    float64       `json:"rss_bytes"`
}

func scrape(u string) (gor, rss float64, err error) {
	resp, err := quick.Get(u + "/metrics")
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		v, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "go_goroutines":
			gor = v
		case "process_resident_memory_bytes":
			rss = v
		}
	}
	return gor, rss, sc.Err()
}

func selfRSS() float64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			f := strings.Fields(l)
			if len(f) >= 2 {
				kb, _ := strconv.ParseFloat(f[1], 64)
				return kb * 1024
			}
		}
	}
	return 0
}

// ---------------------------------------------------------------- load

type ledger struct {
	mu        sync.Mutex
	started   map[string]string // run id → how it was started
	outcomes  map[string]int    // caller-side outcome → count
	anomalies []string
	refusals  map[string]int
	resumes   int
}

func (l *ledger) start(id, how string) {
	l.mu.Lock()
	l.started[id] = how
	l.mu.Unlock()
}

func (l *ledger) outcome(o string) {
	l.mu.Lock()
	l.outcomes[o]++
	l.mu.Unlock()
}

func (l *ledger) refuse(r string) {
	l.mu.Lock()
	l.refusals[r]++
	l.mu.Unlock()
}

func (l *ledger) anomaly(format string, args ...any) {
	l.mu.Lock()
	if len(l.anomalies) < 200 {
		l.anomalies = append(l.anomalies, fmt.Sprintf(format, args...))
	}
	l.mu.Unlock()
}

type sseEvent struct {
	ID   int
	Type string
}

// readSSE reads an SSE body; stopAfter > 0 stops after that many events
// with an id. It returns the run id named in the ": funduq run" comment.
func readSSE(body io.Reader, stopAfter int) (runID string, evs []sseEvent, err error) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<16), 1<<22)
	var cur sseEvent
	var data string
	ids := 0
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, ": funduq run "):
			runID = strings.TrimPrefix(line, ": funduq run ")
		case strings.HasPrefix(line, "id:"):
			cur.ID, _ = strconv.Atoi(strings.TrimSpace(line[3:]))
		case strings.HasPrefix(line, "data:"):
			data += strings.TrimSpace(line[5:])
		case line == "":
			if data != "" {
				var v struct {
					Type string `json:"type"`
				}
				_ = json.Unmarshal([]byte(data), &v)
				cur.Type = v.Type
				evs = append(evs, cur)
				if cur.ID > 0 {
					ids++
				}
				if stopAfter > 0 && ids >= stopAfter {
					return runID, evs, nil
				}
			}
			cur, data = sseEvent{}, ""
		}
	}
	return runID, evs, sc.Err()
}

func terminal(t string) bool { return t == "RUN_FINISHED" || t == "RUN_ERROR" }

type caller struct {
	s    *stack
	l    *ledger
	keys []string
	rng  *rand.Rand
	n    int
	id   int
}

var streamClient = &http.Client{Timeout: 2 * time.Minute}

func (c *caller) door() *procstack.Proc { return c.s.doors[c.rng.IntN(len(c.s.doors))] }

func (c *caller) other(d *procstack.Proc) *procstack.Proc {
	for _, p := range c.s.doors {
		if p != d {
			return p
		}
	}
	return d
}

func (c *caller) loop(ctx context.Context) {
	for ctx.Err() == nil {
		c.n++
		switch x := c.rng.IntN(100); {
		case x < 45:
			c.agui("echo", false)
		case x < 65:
			c.agui("ticker", x < 55) // half of these drop the stream and resume elsewhere
		case x < 90:
			c.a2a()
		default:
			c.read()
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(50+c.rng.IntN(200)) * time.Millisecond):
		}
	}
}

func (c *caller) agui(agent string, resume bool) {
	d := c.door()
	key := c.keys[c.rng.IntN(len(c.keys))]
	thread := fmt.Sprintf("soak-%d-%d-%d", c.id, c.n, time.Now().UnixNano())
	body := fmt.Sprintf(`{"threadId":%q,"runId":%q,"messages":[{"id":"u1","role":"user","content":"soak %d"}]}`, thread, "c-"+thread, c.n)
	req, _ := http.NewRequest(http.MethodPost, d.URL+"/agui/"+key+"/"+agent, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := streamClient.Do(req)
	if err != nil {
		c.l.refuse("agui: transport error")
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		_, _ = io.Copy(io.Discard, resp.Body)
		c.l.refuse(fmt.Sprintf("agui: HTTP %d", resp.StatusCode))
		return
	}
	stopAfter := 0
	if resume {
		stopAfter = 3
	}
	runID, evs, err := readSSE(resp.Body, stopAfter)
	if runID == "" {
		c.l.refuse("agui: stream named no run")
		return
	}
	c.l.start(runID, "agui/"+agent)
	resp.Body.Close()
	all := evs
	last := lastID(evs)
	// A stream that was dropped (by us, or by a door or network failure)
	// resumes at another door from Last-Event-ID, a few times at most.
	for try := 0; try < 5 && !(len(all) > 0 && terminal(all[len(all)-1].Type)); try++ {
		if try > 0 || !resume {
			time.Sleep(200 * time.Millisecond)
		}
		d = c.other(d)
		more, err2 := c.follow(d, runID, last)
		if err2 != nil {
			err = err2
			continue
		}
		c.l.mu.Lock()
		c.l.resumes++
		c.l.mu.Unlock()
		all = append(all, more...)
		last = max(last, lastID(more))
	}
	prev := 0
	for _, e := range all {
		if e.ID == 0 {
			continue
		}
		if e.ID != prev+1 {
			c.l.anomaly("run %s: event id %d after %d", runID, e.ID, prev)
			break
		}
		prev = e.ID
	}
	switch {
	case len(all) == 0 || !terminal(all[len(all)-1].Type):
		c.l.outcome("agui: stream ended without a terminal event")
		if err != nil {
			c.l.anomaly("run %s: stream never ended: %v", runID, err)
		} else {
			c.l.anomaly("run %s: stream never ended", runID)
		}
	case all[len(all)-1].Type == "RUN_FINISHED":
		c.l.outcome("agui: RUN_FINISHED")
	default:
		c.l.outcome("agui: RUN_ERROR")
	}
}

func lastID(evs []sseEvent) int {
	n := 0
	for _, e := range evs {
		if e.ID > n {
			n = e.ID
		}
	}
	return n
}

func (c *caller) follow(d *procstack.Proc, runID string, last int) ([]sseEvent, error) {
	req, _ := http.NewRequest(http.MethodGet, d.URL+"/runs/"+runID+"/events", nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", strconv.Itoa(last))
	resp, err := streamClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil, fmt.Errorf("resume: HTTP %d", resp.StatusCode)
	}
	_, evs, err := readSSE(resp.Body, 0)
	return evs, err
}

func (c *caller) a2a() {
	d := c.door()
	key := c.keys[c.rng.IntN(len(c.keys))]
	msgID := fmt.Sprintf("soak-a2a-%d-%d-%d", c.id, c.n, time.Now().UnixNano())
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"kind":"message","messageId":%q,"role":"user","parts":[{"kind":"text","text":"soak"}]}}}`, msgID)
	resp, err := streamClient.Post(d.URL+"/a2a/"+key+"/echo", "application/json", strings.NewReader(body))
	if err != nil {
		c.l.refuse("a2a: transport error")
		return
	}
	defer resp.Body.Close()
	var out struct {
		Result *struct {
			ID     string `json:"id"`
			Status struct {
				State string `json:"state"`
			} `json:"status"`
		} `json:"result"`
		Error *struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
		c.l.refuse(fmt.Sprintf("a2a: HTTP %d", resp.StatusCode))
		return
	}
	if out.Error != nil || out.Result == nil {
		code := 0
		if out.Error != nil {
			code = out.Error.Code
		}
		c.l.refuse(fmt.Sprintf("a2a: JSON-RPC error %d", code))
		return
	}
	c.l.start(out.Result.ID, "a2a/echo")
	c.l.outcome("a2a: task " + out.Result.Status.State)
}

func (c *caller) read() {
	resp, err := quick.Get(c.door().URL + "/agents")
	if err != nil {
		c.l.refuse("agents: transport error")
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		c.l.refuse(fmt.Sprintf("agents: HTTP %d", resp.StatusCode))
	}
}

// ---------------------------------------------------------------- providers

func seedHex(b byte) string { return strings.Repeat(fmt.Sprintf("%02x", b), 32) }

// startProvider runs an SDK provider in this process (a storm's extra
// providers); the stack stops it at the latest when the soak ends.
func (s *stack) startProvider(seed byte, agents []provider.Agent) (*procstack.SDK, error) {
	sg, err := identity.NewSignerFromSeedHex(seedHex(seed))
	if err != nil {
		return nil, err
	}
	return s.RunSDK(provider.Config{BaseURL: s.lb.URL, Signer: sg, FunduqKey: s.funduqKey, Agents: agents,
		Backoff:      provider.Backoff{Min: 100 * time.Millisecond, Max: 2 * time.Second},
		PingInterval: 2 * time.Second, Logger: slog.New(slog.DiscardHandler)})
}

func agents() []provider.Agent {
	return []provider.Agent{
		{Name: "echo", Handler: func(ctx context.Context, r *provider.Run) error {
			if err := r.Emit(ctx, map[string]any{"type": "RUN_STARTED", "threadId": r.ThreadID, "runId": r.ID}); err != nil {
				return err
			}
			if err := r.EmitText(ctx, r.ID+"-reply", "echo: "+r.LastUserText()); err != nil {
				return err
			}
			return r.Emit(ctx, map[string]any{"type": "RUN_FINISHED", "threadId": r.ThreadID, "runId": r.ID})
		}},
		{Name: "ticker", Handler: func(ctx context.Context, r *provider.Run) error {
			if err := r.Emit(ctx, map[string]any{"type": "RUN_STARTED", "threadId": r.ThreadID, "runId": r.ID}); err != nil {
				return err
			}
			mid := r.ID + "-m"
			if err := r.Emit(ctx, map[string]any{"type": "TEXT_MESSAGE_START", "messageId": mid, "role": "assistant"}); err != nil {
				return err
			}
			for i := range 12 {
				select {
				case <-time.After(100 * time.Millisecond):
				case <-ctx.Done():
					return context.Cause(ctx)
				}
				if err := r.Emit(ctx, map[string]any{"type": "TEXT_MESSAGE_CONTENT", "messageId": mid, "delta": fmt.Sprintf("tick %d ", i)}); err != nil {
					return err
				}
			}
			if err := r.Emit(ctx, map[string]any{"type": "TEXT_MESSAGE_END", "messageId": mid}); err != nil {
				return err
			}
			return r.Emit(ctx, map[string]any{"type": "RUN_FINISHED", "threadId": r.ThreadID, "runId": r.ID})
		}},
	}
}

// providerMain is "soak provider": one SDK provider process.
func providerMain(args []string) int {
	fs := flag.NewFlagSet("soak provider", flag.ContinueOnError)
	seed := fs.Int("seed", 0x40, "the provider key's seed byte")
	broker := fs.String("broker", "", "the broker URL (the balancer)")
	key := fs.String("funduq-key", "", "funduq's public key, pinned")
	addr := fs.String("addr", "127.0.0.1:0", "where /metrics and /connected listen")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sg, err := identity.NewSignerFromSeedHex(seedHex(byte(*seed)))
	if err != nil {
		log.Error("soak provider: key", "err", err)
		return 2
	}
	cl, err := provider.New(provider.Config{BaseURL: *broker, Signer: sg, FunduqKey: *key, Agents: agents(),
		Backoff:      provider.Backoff{Min: 100 * time.Millisecond, Max: 2 * time.Second},
		PingInterval: 2 * time.Second, Logger: log})
	if err != nil {
		log.Error("soak provider: config", "err", err)
		return 2
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /connected", func(w http.ResponseWriter, _ *http.Request) {
		if !cl.Connected() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Error("soak provider: listen", "err", err)
		return 1
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	if err := cl.Run(ctx); err != nil {
		log.Error("soak provider: run", "err", err)
		return 1
	}
	return 0
}

// ---------------------------------------------------------------- the run

type incident struct {
	At     time.Duration `json:"at"`
	What   string        `json:"what"`
	Result string        `json:"result"`
}

type report struct {
	Duration       string         `json:"duration"`
	Started        int            `json:"runs_started"`
	ByStatus       map[string]int `json:"runs_by_status"`
	FailedByReason map[string]int `json:"runs_failed_by_reason"`
	CallerOutcomes map[string]int `json:"caller_outcomes"`
	Refusals       map[string]int `json:"refusals"`
	Resumes        int            `json:"stream_resumes"`
	RunsInDB       int            `json:"runs_in_db"`
	Unsettled      []string       `json:"unsettled_runs"`
	Unrecorded     []string       `json:"started_but_not_in_db"`
	Anomalies      []string       `json:"stream_anomalies"`
	Incidents      []incident     `json:"incidents"`
	Samples        []sample       `json:"samples"`
	Footprint      []footprintRow `json:"footprint"`
	Accounted      bool           `json:"every_run_accounted_for"`
	Verdict        string         `json:"verdict"`
	LogDir         string         `json:"log_dir"`
	Settings       map[string]any `json:"settings"`
}

type footprintRow struct {
	Process string `json:"process"`
	Start   sample `json:"start"`
	Middle  sample `json:"middle"`
	End     sample `json:"end"`
}

func run(ctx context.Context, o options, log *slog.Logger) (bool, error) {
	began := time.Now()
	if o.logDir == "" {
		d, err := os.MkdirTemp("", "funduq-soak-")
		if err != nil {
			return false, err
		}
		o.logDir = d
	} else if err := os.MkdirAll(o.logDir, 0o755); err != nil {
		return false, err
	}
	log.Info("soak: building the binaries", "logs", o.logDir)
	bins, err := procstack.Build(ctx, o.logDir)
	if err != nil {
		return false, err
	}
	if o.dbURL == "" {
		pg, err := testservers.StartPostgres()
		if err != nil {
			return false, err
		}
		defer pg.Close()
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		o.dbURL, err = testservers.MigratedDB(sctx, pg)
		cancel()
		if err != nil {
			return false, err
		}
		log.Info("soak: private PostgreSQL", "port", pg.Port, "log", pg.Log())
	}
	if o.redisURL == "" {
		rs, err := testservers.StartRedis()
		if err != nil {
			return false, err
		}
		defer rs.Close()
		o.redisURL = rs.URL()
		log.Info("soak: private Redis", "port", rs.Port)
	}
	signer, _ := identity.NewSignerFromSeedHex(identitySeed)
	ps, err := procstack.New(procstack.Config{
		Binaries: bins, DatabaseURL: o.dbURL, RedisURL: o.redisURL, RedisPrefix: "soak:",
		IdentityKey: identitySeed, TokenSecret: tokenSecret,
		Env: []string{"FUNDUQ_LEASE_TTL=" + o.leaseTTL.String(), "FUNDUQ_PROVIDER_GRACE=15s",
			"FUNDUQ_DELIVER_TIMEOUT=5s", "FUNDUQ_UNSERVED_TIMEOUT=30s", "FUNDUQ_LOG_LEVEL=info"},
		LogDir: o.logDir, Boot: boot, StopGrace: 10 * time.Second,
	})
	if err != nil {
		return false, err
	}
	defer ps.Close() // before the private servers go
	s := &stack{Stack: ps, funduqKey: signer.PublicKeyHex()}
	if _, err := s.StartBroker(ctx, "n1"); err != nil {
		return false, err
	}
	if _, _, err := s.waitLeader(boot); err != nil {
		return false, err
	}
	if _, err := s.StartBroker(ctx, "n2"); err != nil {
		return false, err
	}
	for _, n := range []string{"d1", "d2"} {
		d, err := s.StartDoor(ctx, n)
		if err != nil {
			return false, err
		}
		s.doors = append(s.doors, d)
	}
	if s.lb, err = s.Balancer(); err != nil {
		return false, err
	}

	var keys []string
	for i := range o.providers {
		seed := byte(0x40 + i)
		if _, err := s.startProviderProc(ctx, fmt.Sprintf("p%d", i+1), seed); err != nil {
			return false, err
		}
		sg, _ := identity.NewSignerFromSeedHex(seedHex(seed))
		keys = append(keys, sg.PublicKeyHex())
	}

	l := &ledger{started: map[string]string{}, outcomes: map[string]int{}, refusals: map[string]int{}}
	var rep report
	rep.LogDir = o.logDir
	rep.Settings = map[string]any{"duration": o.duration.String(), "failover_every": o.failoverEvery.String(),
		"storm_every": o.stormEvery.String(), "callers": o.callers, "providers": o.providers,
		"storm_providers": o.stormProviders, "lease_ttl": o.leaseTTL.String(), "provider_grace": "15s"}
	var repMu sync.Mutex
	t0 := time.Now()
	note := func(what, result string) {
		repMu.Lock()
		rep.Incidents = append(rep.Incidents, incident{At: time.Since(t0).Round(time.Second), What: what, Result: result})
		repMu.Unlock()
		log.Info("soak: "+what, "result", result, "at", time.Since(t0).Round(time.Second).String())
	}

	sampleAll := func() {
		at := time.Since(t0).Round(time.Second)
		var got []sample
		for _, p := range s.Current() {
			if !p.Alive() {
				continue
			}
			g, r, err := scrape(p.URL)
			if err != nil {
				continue
			}
			got = append(got, sample{At: at, Process: p.Name, Incarnation: p.Incarnation, Goroutines: g, RSSBytes: r})
		}
		got = append(got, sample{At: at, Process: "soak (callers, storm providers)", Incarnation: 1,
			Goroutines: float64(runtime.NumGoroutine()), RSSBytes: selfRSS()})
		repMu.Lock()
		rep.Samples = append(rep.Samples, got...)
		repMu.Unlock()
	}

	loadCtx, stopLoad := context.WithTimeout(ctx, o.duration)
	defer stopLoad()
	var wg sync.WaitGroup
	for i := range o.callers {
		c := &caller{s: s, l: l, keys: keys, rng: rand.New(rand.NewPCG(uint64(i+1), uint64(time.Now().UnixNano()))), id: i}
		wg.Add(1)
		go func() { defer wg.Done(); c.loop(loadCtx) }()
	}
	sampleAll()

	// The schedule: samples, failovers, storms.
	var fo, storms atomic.Int32
	wg.Add(1)
	go func() {
		defer wg.Done()
		sampleT := time.NewTicker(o.sampleEvery)
		defer sampleT.Stop()
		foT := time.NewTicker(o.failoverEvery)
		defer foT.Stop()
		stormAt := time.After(o.stormEvery/2 + o.failoverEvery/2)
		for {
			select {
			case <-loadCtx.Done():
				return
			case <-sampleT.C:
				sampleAll()
			case <-foT.C:
				n := fo.Add(1)
				old := s.Leader(loadCtx)
				if old == nil {
					note("failover", "skipped: no leader to fail over")
					continue
				}
				how := "SIGTERM (handover)"
				sig := syscall.SIGTERM
				if n%2 == 0 {
					how, sig = "SIGKILL", syscall.SIGKILL
				}
				began := time.Now()
				old.Signal(sig)
				nl, took, err := s.waitLeader(boot, old)
				res := ""
				if err != nil {
					res = "FAILED: " + err.Error()
				} else {
					res = fmt.Sprintf("%s leads after %v", nl.Name, took.Round(time.Millisecond))
				}
				gone, cancel := context.WithTimeout(context.Background(), boot)
				if old.Wait(gone) != nil {
					_ = old.Kill(context.Background())
				}
				cancel()
				if _, err := s.Restart(context.Background(), old); err != nil {
					res += "; restart FAILED: " + err.Error()
				} else {
					res += fmt.Sprintf("; %s restarted as a standby (%v after the signal)", old.Name, time.Since(began).Round(time.Millisecond))
				}
				note(fmt.Sprintf("failover %d: %s on leader %s#%d", n, how, old.Name, old.Incarnation), res)
			case <-stormAt:
				stormAt = time.After(o.stormEvery)
				n := storms.Add(1)
				cut := s.lb.CutLinks()
				// Extra providers join in the same moment, and leave again.
				var extra []*procstack.SDK
				for j := range o.stormProviders {
					if p, err := s.startProvider(byte(0x80+j), agents()[:1]); err == nil {
						extra = append(extra, p)
					}
				}
				provs := s.Of(procstack.KindProvider)
				ok, took := waitAll(provs, extra, boot)
				res := fmt.Sprintf("%d connections cut; %d providers joined", cut, len(extra))
				if ok {
					res += fmt.Sprintf("; all %d providers registered again after %v", len(provs)+len(extra), took.Round(time.Millisecond))
				} else {
					res += fmt.Sprintf("; NOT all providers registered within %v", boot)
				}
				for _, p := range extra {
					stopCtx, cancel := context.WithTimeout(context.Background(), boot)
					_ = p.Stop(stopCtx)
					cancel()
				}
				note(fmt.Sprintf("reconnect storm %d", n), res)
			}
		}
	}()
	<-loadCtx.Done()
	log.Info("soak: load window over; waiting for callers to finish")
	wg.Wait()
	sampleAll()

	// Account for every run — also after an interrupt, which ends only the
	// load and the drain.
	interrupted := ctx
	ctx = context.Background()
	pool, err := pgxpool.New(ctx, o.dbURL)
	if err != nil {
		return false, fmt.Errorf("open the database: %w", err)
	}
	defer pool.Close()
	settledBy := time.Now().Add(o.drain)
	var unsettled []string
	for {
		unsettled = unsettled[:0]
		rows, err := pool.Query(ctx, `SELECT run_id FROM runs WHERE status NOT IN ('completed','failed','cancelled','input-required') ORDER BY run_id`)
		if err == nil {
			for rows.Next() {
				var id string
				_ = rows.Scan(&id)
				unsettled = append(unsettled, id)
			}
			rows.Close()
		}
		if err == nil && len(unsettled) == 0 || time.Now().After(settledBy) || interrupted.Err() != nil {
			break
		}
		time.Sleep(time.Second)
	}
	rep.Unsettled = append([]string{}, unsettled...)
	rep.ByStatus, rep.FailedByReason = map[string]int{}, map[string]int{}
	inDB := map[string]bool{}
	rows, err := pool.Query(ctx, `SELECT run_id, status, coalesce(failure_reason,'') FROM runs`)
	if err != nil {
		return false, fmt.Errorf("read runs: %w", err)
	}
	for rows.Next() {
		var id, st, reason string
		if err := rows.Scan(&id, &st, &reason); err != nil {
			rows.Close()
			return false, err
		}
		inDB[id] = true
		rep.ByStatus[st]++
		if st == "failed" {
			rep.FailedByReason[reason]++
		}
	}
	rows.Close()
	rep.RunsInDB = len(inDB)
	l.mu.Lock()
	rep.Started = len(l.started)
	for id := range l.started {
		if !inDB[id] {
			rep.Unrecorded = append(rep.Unrecorded, id)
		}
	}
	rep.CallerOutcomes, rep.Refusals, rep.Resumes, rep.Anomalies = l.outcomes, l.refusals, l.resumes, l.anomalies
	l.mu.Unlock()
	rep.Duration = time.Since(t0).Round(time.Second).String()
	rep.Footprint = footprint(rep.Samples)
	rep.Accounted = len(rep.Unsettled) == 0 && len(rep.Unrecorded) == 0
	ok := rep.Accounted && len(rep.Anomalies) == 0
	rep.Verdict = "PASS"
	if !ok {
		rep.Verdict = "FAIL"
	}
	for _, f := range rep.Footprint {
		if !strings.HasPrefix(f.Process, "n") { // broker nodes restart at every failover
			if f.End.Goroutines > 2*f.Start.Goroutines+50 || f.End.RSSBytes > 3*f.Start.RSSBytes+64<<20 {
				rep.Verdict += fmt.Sprintf("; %s's footprint grew (goroutines %.0f→%.0f, RSS %s→%s)", f.Process,
					f.Start.Goroutines, f.End.Goroutines, mb(f.Start.RSSBytes), mb(f.End.RSSBytes))
			}
		}
	}
	if err := writeReport(o, &rep, time.Since(began)); err != nil {
		return false, err
	}
	return ok, nil
}

func waitAll(procs []*procstack.Proc, sdks []*procstack.SDK, bound time.Duration) (bool, time.Duration) {
	start := time.Now()
	time.Sleep(100 * time.Millisecond) // let the cut links be noticed
	for {
		all := true
		for _, p := range sdks {
			if !p.Client.Connected() {
				all = false
				break
			}
		}
		for _, p := range procs {
			if !all {
				break
			}
			resp, err := quick.Get(p.URL + "/connected")
			if err != nil {
				all = false
				break
			}
			resp.Body.Close()
			all = resp.StatusCode == http.StatusOK
		}
		if all {
			return true, time.Since(start)
		}
		if time.Since(start) > bound {
			return false, time.Since(start)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// footprint picks, for each process name, its first sample after the
// warm-up, the one nearest the middle, and the last.
func footprint(samples []sample) []footprintRow {
	by := map[string][]sample{}
	var names []string
	for _, s := range samples {
		if _, ok := by[s.Process]; !ok {
			names = append(names, s.Process)
		}
		by[s.Process] = append(by[s.Process], s)
	}
	sort.Strings(names)
	var out []footprintRow
	for _, n := range names {
		ss := by[n]
		start := ss[0]
		if len(ss) > 2 {
			start = ss[1] // the first sample is taken before any load
		}
		mid := ss[len(ss)/2]
		out = append(out, footprintRow{Process: n, Start: start, Middle: mid, End: ss[len(ss)-1]})
	}
	return out
}

func mb(b float64) string { return fmt.Sprintf("%.1f MiB", b/(1<<20)) }

func sortedKeys(m map[string]int) []string {
	var k []string
	for s := range m {
		k = append(k, s)
	}
	sort.Strings(k)
	return k
}

func writeReport(o options, r *report, took time.Duration) error {
	var b strings.Builder
	fmt.Fprintf(&b, "funduq soak report — %s\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "load %s (wall %s incl. build and drain); settings %v\n", r.Duration, took.Round(time.Second), r.Settings)
	fmt.Fprintf(&b, "verdict: %s\n\n", r.Verdict)
	fmt.Fprintf(&b, "runs started (acknowledged by a door): %d; runs in the database: %d\n", r.Started, r.RunsInDB)
	fmt.Fprintf(&b, "every run accounted for: %v (unsettled %d, acknowledged but not stored %d)\n", r.Accounted, len(r.Unsettled), len(r.Unrecorded))
	b.WriteString("\nruns by status (database):\n")
	for _, k := range sortedKeys(r.ByStatus) {
		fmt.Fprintf(&b, "  %-16s %d\n", k, r.ByStatus[k])
	}
	b.WriteString("failed by reason:\n")
	if len(r.FailedByReason) == 0 {
		b.WriteString("  (none)\n")
	}
	for _, k := range sortedKeys(r.FailedByReason) {
		fmt.Fprintf(&b, "  %-40s %d\n", k, r.FailedByReason[k])
	}
	b.WriteString("caller outcomes:\n")
	for _, k := range sortedKeys(r.CallerOutcomes) {
		fmt.Fprintf(&b, "  %-48s %d\n", k, r.CallerOutcomes[k])
	}
	fmt.Fprintf(&b, "  %-48s %d\n", "stream resumes (Last-Event-ID at another door)", r.Resumes)
	b.WriteString("refused or failed requests (no run started):\n")
	if len(r.Refusals) == 0 {
		b.WriteString("  (none)\n")
	}
	for _, k := range sortedKeys(r.Refusals) {
		fmt.Fprintf(&b, "  %-48s %d\n", k, r.Refusals[k])
	}
	b.WriteString("\nincidents:\n")
	for _, i := range r.Incidents {
		fmt.Fprintf(&b, "  +%-8s %s: %s\n", i.At, i.What, i.Result)
	}
	b.WriteString("\nfootprint (goroutines / resident memory; broker #n = incarnation):\n")
	fmt.Fprintf(&b, "  %-32s %-30s %-30s %-30s\n", "process", "start", "middle", "end")
	cell := func(s sample) string {
		return fmt.Sprintf("+%s #%d %4.0f / %s", s.At, s.Incarnation, s.Goroutines, mb(s.RSSBytes))
	}
	for _, f := range r.Footprint {
		fmt.Fprintf(&b, "  %-32s %-30s %-30s %-30s\n", f.Process, cell(f.Start), cell(f.Middle), cell(f.End))
	}
	if len(r.Unsettled) > 0 {
		fmt.Fprintf(&b, "\nunsettled runs: %v\n", r.Unsettled)
	}
	if len(r.Unrecorded) > 0 {
		fmt.Fprintf(&b, "\nacknowledged but not stored: %v\n", r.Unrecorded)
	}
	if len(r.Anomalies) > 0 {
		b.WriteString("\nstream anomalies:\n")
		for _, a := range r.Anomalies {
			fmt.Fprintf(&b, "  %s\n", a)
		}
	}
	fmt.Fprintf(&b, "\nprocess logs: %s\n", r.LogDir)
	if err := os.WriteFile(o.out, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", o.out, err)
	}
	js, _ := json.MarshalIndent(r, "", "  ")
	if err := os.WriteFile(o.jsonOut, js, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", o.jsonOut, err)
	}
	fmt.Print(b.String())
	return nil
}
