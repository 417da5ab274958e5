package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Phase is one load phase's figures.
type Phase struct {
	Name        string  `json:"name"`
	OfferedPerS float64 `json:"offered_runs_per_s,omitempty"` // open loop only
	RunsPerSec  float64 `json:"completed_runs_per_s"`
	Completed   int64   `json:"completed"`
	Failed      int64   `json:"failed"`
	Skipped     int     `json:"skipped,omitempty"`
	DispatchP50 float64 `json:"dispatch_p50_ms"`
	DispatchP90 float64 `json:"dispatch_p90_ms"`
	DispatchP99 float64 `json:"dispatch_p99_ms"`
	// Accepted* are dispatch latency as issue #9 defines it: the door
	// accepted the run (its CreateRun committed, NOTIFY sent) → the run
	// frame at the provider. Dispatch* above start at the caller's send.
	AcceptedP50     float64 `json:"accepted_dispatch_p50_ms"`
	AcceptedP90     float64 `json:"accepted_dispatch_p90_ms"`
	AcceptedP99     float64 `json:"accepted_dispatch_p99_ms"`
	AcceptedRuns    int     `json:"accepted_dispatch_samples"`
	AcceptedMissing int64   `json:"accepted_dispatch_missing"`
	AcceptedEarly   int64   `json:"accepted_dispatch_frame_first"` // frames that beat the door's return, counted as 0
	EventP50        float64 `json:"event_p50_ms"`
	EventP99        float64 `json:"event_p99_ms"`
	DispatchRuns    int     `json:"dispatch_samples"`
	EventCount      int     `json:"event_samples"`
	// LoadedRTT* is the NOTIFY round trip measured during the phase
	// (loadedRTT), half load only: the floor under the same load.
	LoadedRTTP50     float64 `json:"loaded_notify_rtt_p50_ms,omitempty"`
	LoadedRTTP99     float64 `json:"loaded_notify_rtt_p99_ms,omitempty"`
	LoadedRTTSamples int     `json:"loaded_notify_rtt_samples,omitempty"`
}

// Stream is the one-run stream figures.
type Stream struct {
	Events       int     `json:"events"`
	Read         int     `json:"read_by_caller"`
	Stored       int     `json:"stored"`
	StoredUnique int     `json:"stored_unique_seqs"`
	Seconds      float64 `json:"seconds"`
	PerSec       float64 `json:"events_per_s"`
	// StoreSeconds spans the transactions that stored the events (first to
	// last created_at): the broker's part of the stream.
	StoreSeconds float64 `json:"store_seconds"`
	Batches      int     `json:"store_transactions"`
	// BackpressureWaits is how often the node's read loops waited on a
	// full link backlog during the stream (its lane was the bottleneck).
	BackpressureWaits float64 `json:"backpressure_waits"`
	// StoreFloorPerSec is the floor measured right after the stream: as
	// many events stored into a scratch run with the broker's own store
	// function, in batches of StoreFloorBatch (the stream's mean batch),
	// from one connection (storeFloor).
	StoreFloorPerSec float64 `json:"store_floor_events_per_s,omitempty"`
	StoreFloorBatch  int     `json:"store_floor_batch,omitempty"`
	// LaneStoreSeconds and LanePublishSeconds are the node's own account
	// (its /metrics) of the time its lanes spent in the store call and in
	// the live feed's publish during the stream.
	LaneStoreSeconds   float64 `json:"lane_store_seconds"`
	LanePublishSeconds float64 `json:"lane_publish_seconds"`
}

// Report is a whole load run.
type Report struct {
	At        time.Time `json:"at"`
	Config    Config    `json:"config"`
	GoVersion string    `json:"go"`
	CPUs      int       `json:"cpus"`
	Floors    Floors    `json:"floors"`
	Max       Phase     `json:"max"`
	Half      Phase     `json:"half"`
	Sweep     []Phase   `json:"sweep,omitempty"`
	Stream    *Stream   `json:"stream,omitempty"`
	Idle      *Idle     `json:"idle,omitempty"`
	Growth    *Growth   `json:"growth,omitempty"`
	Targets   []Target  `json:"targets"`
	Profiles  []string  `json:"profiles,omitempty"`
}

func phaseOf(name string, p *probe, d time.Duration) Phase {
	p.counts.Lock()
	defer p.counts.Unlock()
	return Phase{Name: name, RunsPerSec: float64(p.done.Load()) / d.Seconds(), Completed: p.done.Load(), Failed: p.failed.Load(),
		DispatchP50: p.dispatch.ms(0.5), DispatchP90: p.dispatch.ms(0.9), DispatchP99: p.dispatch.ms(0.99),
		AcceptedP50: p.accepted.ms(0.5), AcceptedP90: p.accepted.ms(0.9), AcceptedP99: p.accepted.ms(0.99),
		AcceptedRuns: p.accepted.n(), AcceptedMissing: p.acceptedMissing.Load(), AcceptedEarly: p.acceptedEarly.Load(),
		EventP50: p.event.ms(0.5), EventP99: p.event.ms(0.99), DispatchRuns: p.dispatch.n(), EventCount: p.event.n()}
}

// loadedRTTEvery paces the NOTIFY round trips measured during the half
// load phase: ~25 a second beside the phase's ~1,000 commits.
const loadedRTTEvery = 40 * time.Millisecond

// Run measures everything c asks for and reports it to out.
func Run(ctx context.Context, c Config, out io.Writer) (*Report, error) {
	logf := func(f string, a ...any) {
		if !c.Quiet {
			fmt.Fprintf(os.Stderr, "load: "+f+"\n", a...)
		}
	}
	rep := &Report{At: time.Now().UTC(), Config: c, GoVersion: runtime.Version(), CPUs: runtime.NumCPU()}
	st, err := startStack(ctx, c, logf)
	if err != nil {
		return nil, err
	}
	defer st.close()

	if !c.GrowthOnly {
		logf("floors (%s each)", c.FloorTime)
		if rep.Floors, err = measureFloors(ctx, st.dbURL, c.Callers, c.FloorTime); err != nil {
			return nil, err
		}
	}
	if c.BrokerURL == "" && !c.GrowthOnly { // it needs a database of its own: only with a stack of the tool's
		var op offerPath
		if rep.Floors.RunStorePerSec, op, err = runStoreFloor(ctx, c.PostgresURL, c.Callers, c.Events, c.EventSize, c.FloorTime); err != nil {
			return nil, err
		}
		rep.Floors.NoticePathP50, rep.Floors.NoticePathP99 = op.NoticeP50, op.NoticeP99
		rep.Floors.OfferPathP50, rep.Floors.OfferPathP99 = op.OfferP50, op.OfferP99
	}
	f, err := startFleet(ctx, st.brokerURL, st.accepted, c.Providers, c.Events, c.EventSize)
	if err != nil {
		return nil, err
	}
	defer f.stop()
	callers := c.callers(st.doorsURL)

	// Warm up: connections, prepared statements, the lanes' first runs.
	f.closedLoop(ctx, callers, min(2*time.Second, c.Duration))
	if c.BrokerURL == "" { // the stack's own database: ANALYZE, seed, read its statistics
		if rep.Growth, err = measureGrowth(ctx, c, f, st, logf); err != nil {
			return nil, err
		}
	}
	if c.GrowthOnly {
		fmt.Fprint(out, growthTable(rep.Growth))
		c.DocPath, c.SVGPath = "", "" // the load table and the chart need the load phases
		return rep, writeOutputs(c, rep)
	}

	logf("max load: %d callers, closed loop, %s", c.Callers, c.Duration)
	stopProf := startProfiles(c, st, logf, "max", max(1, int(c.Duration.Seconds())-1))
	p, d := f.closedLoop(ctx, callers, c.Duration)
	rep.Profiles = stopProf()
	rep.Max = phaseOf("max", p, d)
	if rep.Max.Completed == 0 {
		return nil, fmt.Errorf("no run completed at max load (%d failed)", rep.Max.Failed)
	}
	limit := 8 * c.Callers
	fractions := append([]float64{0.5}, c.Sweep...)
	for i, fr := range fractions {
		if i > 0 && fr == 0.5 {
			continue
		}
		rate := fr * rep.Max.RunsPerSec
		logf("open loop at %.0f%% of max: %.1f runs/s, %s", 100*fr, rate, c.Duration)
		var stopRTT func() *hist
		if i == 0 {
			if stopRTT, err = loadedRTT(ctx, st.dbURL, loadedRTTEvery); err != nil {
				return nil, err
			}
		}
		p, d, skipped := f.openLoop(ctx, callers, rate, c.Duration, limit)
		ph := phaseOf(fmt.Sprintf("%.0f%%", 100*fr), p, d)
		ph.OfferedPerS, ph.Skipped = rate, skipped
		if stopRTT != nil {
			h := stopRTT()
			ph.LoadedRTTP50, ph.LoadedRTTP99, ph.LoadedRTTSamples = h.ms(0.5), h.ms(0.99), h.n()
		}
		if i == 0 {
			rep.Half = ph
			rep.Half.Name = "half"
		}
		if len(c.Sweep) > 0 {
			rep.Sweep = append(rep.Sweep, ph)
		}
	}
	if len(c.Sweep) > 0 {
		max := rep.Max
		max.OfferedPerS = rep.Max.RunsPerSec
		rep.Sweep = append(rep.Sweep, max)
		sortPhases(rep.Sweep)
	}
	if c.Stream > 0 {
		logf("stream: one run of %d events", c.Stream)
		stopProf := startProfiles(c, st, logf, "stream", 1)
		bp0 := metricOf(st.brokerURL, "funduq_broker_link_backpressure_total")
		st0 := metricOf(st.brokerURL, "funduq_broker_event_store_seconds_total")
		pub0 := metricOf(st.brokerURL, "funduq_broker_event_publish_seconds_total")
		s, err := streamOne(ctx, f, callers[len(callers)-1], st.dbURL, c.Stream)
		rep.Profiles = append(rep.Profiles, stopProf()...)
		if err != nil {
			return nil, err
		}
		s.BackpressureWaits = metricOf(st.brokerURL, "funduq_broker_link_backpressure_total") - bp0
		s.LaneStoreSeconds = metricOf(st.brokerURL, "funduq_broker_event_store_seconds_total") - st0
		s.LanePublishSeconds = metricOf(st.brokerURL, "funduq_broker_event_publish_seconds_total") - pub0
		rep.Stream = s
	}
	f.stop()
	if c.Links > 0 {
		logf("idle links: %d", c.Links)
		window := c.idleWindow
		if window <= 0 {
			window = 10 * time.Second
		}
		idle, err := idleLinks(ctx, st, c.Links, c.LinkKeys, window, c.ProfileDir, logf)
		if err != nil {
			return nil, err
		}
		rep.Idle = &idle
	}
	rep.Targets = targets(rep)
	printTable(out, rep)
	if err := writeOutputs(c, rep); err != nil {
		return rep, err
	}
	return rep, nil
}

// streamOne streams n events in one run and checks every one was stored.
func streamOne(ctx context.Context, f *fleet, c *caller, dbURL string, n int) (*Stream, error) {
	first := make(chan time.Time, 1)
	f.stream <- streamStart{n: n, first: first}
	var last time.Time
	read := 0
	runID, _, err := (&caller{hc: c.hc, doors: c.doors}).aguiRun(ctx, f.keys[0], "stream", "n="+strconv.Itoa(n), func(typ string, _ []byte) {
		if typ == "CUSTOM" {
			read++
			last = time.Now()
		}
	})
	if err != nil {
		return nil, fmt.Errorf("stream run: %w", err)
	}
	var t0 time.Time
	select {
	case t0 = <-first:
	default:
		return nil, fmt.Errorf("stream run: the provider never started it")
	}
	s := &Stream{Events: n, Read: read, Seconds: last.Sub(t0).Seconds()}
	if s.Seconds > 0 {
		s.PerSec = float64(read) / s.Seconds
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(ctx, `SELECT count(*), count(DISTINCT seq), count(DISTINCT created_at),
		coalesce(extract(epoch FROM max(created_at) - min(created_at)), 0)::float8 FROM run_events WHERE run_id = $1`, runID).
		Scan(&s.Stored, &s.StoredUnique, &s.Batches, &s.StoreSeconds); err != nil {
		return nil, err
	}
	// The floor: the same events stored the way the lane stores them, in
	// batches of the stream's mean size, with nothing else in the way.
	var sample []byte
	var withPseq bool
	if err := conn.QueryRow(ctx, `SELECT event::text, provider_seq IS NOT NULL FROM run_events
		WHERE run_id = $1 AND event->>'type' = 'CUSTOM' ORDER BY seq LIMIT 1`, runID).Scan(&sample, &withPseq); err != nil {
		return nil, fmt.Errorf("stream: a stored event: %w", err)
	}
	s.StoreFloorBatch = max(1, (s.Stored+s.Batches/2)/max(1, s.Batches))
	if s.StoreFloorPerSec, err = storeFloor(ctx, dbURL, runID, s.Stored, s.StoreFloorBatch, sample, withPseq); err != nil {
		return nil, err
	}
	return s, nil
}

// metricOf reads one unlabelled value from the node's /metrics (0 when absent).
func metricOf(brokerURL, name string) float64 {
	resp, err := http.Get(brokerURL + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}

// startProfiles takes CPU profiles of the broker node (for secs) and of
// this process (until the returned stop) for one phase, when asked.
func startProfiles(c Config, st *stack, logf func(string, ...any), tag string, secs int) func() []string {
	if c.ProfileDir == "" {
		return func() []string { return nil }
	}
	_ = os.MkdirAll(c.ProfileDir, 0o755)
	var files []string
	self := filepath.Join(c.ProfileDir, "load-process-"+tag+".pprof")
	fh, err := os.Create(self)
	if err == nil && pprof.StartCPUProfile(fh) == nil {
		files = append(files, self)
	}
	done := make(chan string, 1)
	if st.pprofAddr != "" {
		go func() {
			resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", st.pprofAddr, secs))
			if err != nil {
				logf("broker profile: %v", err)
				done <- ""
				return
			}
			defer resp.Body.Close()
			p := filepath.Join(c.ProfileDir, "broker-node-"+tag+".pprof")
			b, _ := io.ReadAll(resp.Body)
			if os.WriteFile(p, b, 0o644) != nil {
				p = ""
			}
			done <- p
		}()
	} else {
		done <- ""
	}
	return func() []string {
		pprof.StopCPUProfile()
		if fh != nil {
			fh.Close()
		}
		if p := <-done; p != "" {
			files = append(files, p)
		}
		return files
	}
}

func writeOutputs(c Config, rep *Report) error {
	if c.JSONPath != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(c.JSONPath, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if c.SVGPath != "" {
		if err := os.WriteFile(c.SVGPath, []byte(chart(rep)), 0o644); err != nil {
			return err
		}
	}
	if c.DocPath != "" {
		if err := rewriteDoc(c.DocPath, rep); err != nil {
			return err
		}
	}
	return nil
}
