package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/funduq/funduq-go/internal/leaktest"
	"github.com/funduq/funduq-go/internal/procstack"
)

func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) == "broker" { // the test binary is the broker node child
		os.Exit(brokerChild())
	}
	leaktest.MainWithPools(m, goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"))
}

// stores skips (fails under CI) when PostgreSQL or Redis is absent.
func stores(t *testing.T) (pg, rd string) {
	pg = envOr("FUNDUQ_TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable")
	rd = envOr("FUNDUQ_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, pg)
	if err == nil {
		c.Close(ctx)
		opt, perr := redis.ParseURL(rd)
		if err = perr; err == nil {
			r := redis.NewClient(opt)
			err = r.Ping(ctx).Err()
			r.Close()
		}
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("stores unavailable under CI: %v", err)
		}
		t.Skipf("stores unavailable: %v", err)
	}
	return pg, rd
}

// A tiny run of the whole tool: it completes runs through both doors,
// streams one run with every event stored, opens a few idle links, and
// writes a report that parses, a chart and the doc table.
func TestTinyLoadRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a broker node")
	}
	pg, rd := stores(t)
	dir := t.TempDir()
	doc := filepath.Join(dir, "perf.md")
	if err := os.WriteFile(doc, []byte("# x\n"+docBegin+"\nstale-table-placeholder\n"+docEnd+"\ntail\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := parseFlags([]string{"-postgres", pg, "-redis", rd, "-duration", "1s", "-providers", "2", "-callers", "2",
		"-a2a", "0.5", "-stream", "200", "-preseed", "40", "-links", "5", "-floor-time", "200ms", "-sweep", "0.25",
		"-json", filepath.Join(dir, "r.json"), "-svg", filepath.Join(dir, "c.svg"), "-doc", doc, "-q"}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	c.idleWindow = 500 * time.Millisecond
	c.statsSettle = 1200 * time.Millisecond // the figures are only checked for being there
	var out bytes.Buffer
	rep, err := Run(context.Background(), c, &out)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Max.Completed == 0 || rep.Max.Failed != 0 {
		t.Fatalf("max phase: %d completed, %d failed", rep.Max.Completed, rep.Max.Failed)
	}
	if rep.Max.DispatchRuns == 0 || rep.Max.EventCount == 0 {
		t.Fatalf("no latency samples: %+v", rep.Max)
	}
	// Dispatch from door accepted: measured for the same runs as from the
	// caller's send, and shorter (it leaves out the HTTP request and the
	// door's commit). Frames that beat the door's return count as 0, so in a
	// short phase even the median may be 0; some run must still take time.
	for _, ph := range append([]Phase{rep.Max, rep.Half}, rep.Sweep...) {
		if ph.AcceptedRuns == 0 || int64(ph.AcceptedRuns)+ph.AcceptedMissing != int64(ph.DispatchRuns) || 10*ph.AcceptedMissing > int64(ph.DispatchRuns) {
			t.Fatalf("%s: %d accepted samples, %d missing, of %d runs", ph.Name, ph.AcceptedRuns, ph.AcceptedMissing, ph.DispatchRuns)
		}
		if ph.AcceptedP99 <= 0 || ph.AcceptedP50 > ph.DispatchP50 || ph.AcceptedP90 > ph.DispatchP90 || ph.AcceptedP99 > ph.DispatchP99 {
			t.Fatalf("%s: from door accepted %.2f / %.2f / %.2f ms, from caller send %.2f / %.2f / %.2f ms", ph.Name,
				ph.AcceptedP50, ph.AcceptedP90, ph.AcceptedP99, ph.DispatchP50, ph.DispatchP90, ph.DispatchP99)
		}
	}
	// The NOTIFY round trip is measured during the half-load phase too.
	if h := rep.Half; h.LoadedRTTSamples == 0 || h.LoadedRTTP50 <= 0 || h.LoadedRTTP99 < h.LoadedRTTP50 {
		t.Fatalf("half load's NOTIFY round trips: %d, p50 %.3f, p99 %.3f ms", h.LoadedRTTSamples, h.LoadedRTTP50, h.LoadedRTTP99)
	}
	// The frame's own storage floor (the NOTIFY read) is part of the offer
	// path (on to the offering write), run by run.
	if fl := rep.Floors; fl.NoticePathP50 <= 0 || fl.NoticePathP50 > fl.OfferPathP50 || fl.NoticePathP99 > fl.OfferPathP99 {
		t.Fatalf("offer path floors: notice %.3f / %.3f ms, offering written %.3f / %.3f ms", fl.NoticePathP50, fl.NoticePathP99, fl.OfferPathP50, fl.OfferPathP99)
	}
	for _, tg := range rep.Targets {
		if strings.HasPrefix(tg.Name, "dispatch") && (!strings.Contains(tg.Name, "door accepted") || !strings.Contains(tg.Note, "caller send")) {
			t.Fatalf("dispatch target not judged on door accepted, or without the caller-send figure: %+v", tg)
		}
	}
	if s := rep.Stream; s == nil || s.Read != 200 || s.Stored != 202 || s.StoredUnique != 202 {
		t.Fatalf("stream: %+v", rep.Stream)
	}
	if s := rep.Stream; s.StoreFloorPerSec <= 0 || s.StoreFloorBatch < 1 || s.StoreFloorBatch > s.Stored {
		t.Fatalf("store floor: %+v", s)
	}
	// Growth: each door alone at the history there is and again after 40
	// prior runs (80 messages) were seeded, with the database's own counts.
	if g := rep.Growth; g == nil || len(g.Doors) != 4 || g.PreseedRuns != 40 {
		t.Fatalf("growth: %+v", rep.Growth)
	}
	for i, d := range rep.Growth.Doors {
		if d.Completed == 0 || d.Failed != 0 || d.TxPerRun <= 0 || d.RowsReadPerRun <= 0 || d.PGCPUPerRun < 0 {
			t.Fatalf("growth %d: %+v", i, d)
		}
		if i >= 2 && d.PriorMessages < rep.Growth.Doors[i-2].PriorMessages+80 {
			t.Fatalf("growth %d: %d prior messages after seeding, %d before", i, d.PriorMessages, rep.Growth.Doors[i-2].PriorMessages)
		}
	}
	if !strings.Contains(out.String(), "committed tx/run") {
		t.Fatalf("table without the growth section:\n%s", out.String())
	}
	if rep.Idle == nil || rep.Idle.Opened != 5 {
		t.Fatalf("idle links: %+v", rep.Idle)
	}
	var back Report
	b, err := os.ReadFile(filepath.Join(dir, "r.json"))
	if err != nil || json.Unmarshal(b, &back) != nil || back.Max.Completed != rep.Max.Completed || len(back.Targets) == 0 ||
		back.Half.AcceptedRuns != rep.Half.AcceptedRuns || !strings.Contains(string(b), `"accepted_dispatch_p99_ms"`) {
		t.Fatalf("report JSON: %v\n%s", err, b)
	}
	svg, _ := os.ReadFile(filepath.Join(dir, "c.svg"))
	if !strings.HasPrefix(string(svg), "<svg") || !strings.Contains(string(svg), "p99 (door accepted)") || !strings.HasSuffix(strings.TrimSpace(string(svg)), "</svg>") {
		t.Fatalf("chart: %.200s", svg)
	}
	d, _ := os.ReadFile(doc)
	if strings.Contains(string(d), "stale-table-placeholder") || !strings.Contains(string(d), "completed runs/s") || !strings.Contains(string(d), "door accepted") || !strings.HasSuffix(string(d), docEnd+"\ntail\n") {
		t.Fatalf("doc:\n%s", d)
	}
	if !strings.Contains(out.String(), "dispatch (door accepted → run frame)") || !strings.Contains(out.String(), "dispatch (caller send → run frame)") {
		t.Fatalf("table:\n%s", out.String())
	}
}

func TestFlags(t *testing.T) {
	var out bytes.Buffer
	if _, err := parseFlags([]string{"-help"}, &out); err == nil || !strings.Contains(out.String(), "-providers") {
		t.Fatalf("help: %v\n%s", err, out.String())
	}
	if _, err := parseFlags([]string{"-sweep", "2"}, &out); err == nil {
		t.Fatal("a sweep fraction over 1.5 was accepted")
	}
	if _, err := parseFlags([]string{"-growth-only", "-broker", "http://x", "-doors", "http://y", "-database", "postgres://z"}, &out); err == nil {
		t.Fatal("-growth-only against a running stack was accepted")
	}
	if _, err := parseFlags([]string{"-broker", "http://x"}, &out); err == nil {
		t.Fatal("-broker without -doors was accepted")
	}
	if _, err := parseFlags([]string{"-bin", "/tmp"}, &out); err == nil {
		t.Fatal("-bin without -growth-only was accepted")
	}
	if _, err := parseFlags([]string{"-compare", "/tmp/a"}, &out); err == nil {
		t.Fatal("-compare of one build was accepted")
	}
	if _, err := parseFlags([]string{"-compare", "/tmp/a,/tmp/b", "-rounds", "0"}, &out); err == nil {
		t.Fatal("-compare with no rounds was accepted")
	}
	c, err := parseFlags([]string{"-compare", "/tmp/a, /tmp/b"}, &out)
	if err != nil || !c.GrowthOnly || len(c.Compare) != 2 || c.Compare[1] != "/tmp/b" || c.Rounds != 3 {
		t.Fatalf("-compare: %v %+v", err, c)
	}
}

// A sitting's table gives each door's CPU per run per round and its mean
// for every build, and each later build's ratio of the means to the first
// build's with the spread of the round-by-round ratios.
func TestSittingTable(t *testing.T) {
	g := func(agui, a2a float64) *Growth {
		return &Growth{Doors: []DoorFigures{
			{Door: "agui", PGCPUPerRun: agui / 2, BrokerCPUPerRun: agui / 4, DoorsCPUPerRun: agui / 4, TxPerRun: 3},
			{Door: "a2a", PGCPUPerRun: a2a / 2, BrokerCPUPerRun: a2a / 4, DoorsCPUPerRun: a2a / 4, TxPerRun: 4},
		}}
	}
	s := &Sitting{Builds: []string{"before", "after"}, Rounds: [][]*Growth{
		{g(3, 4), g(1.5, 2.4)},
		{g(3, 4), g(1.8, 2)},
	}}
	table := sittingTable(s)
	for _, want := range []string{
		"| agui | before | 3.00 | 3.00 | **3.00** | 3.00 | 1 | |",
		"| agui | after | 1.50 | 1.80 | **1.65** | 3.00 | **0.55** | 0.50–0.60 |",
		"| a2a | after | 2.40 | 2.00 | **2.20** | 4.00 | **0.55** | 0.50–0.60 |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}

// With -bin the stack is another build's broker-node and doors-local: the
// tool migrates the database with that build's own migrations, and the
// doors' CPU per run is measured in their own process, apart from the
// callers and providers.
func TestGrowthOfABuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts a broker node and the doors")
	}
	pg, rd := stores(t)
	bins, err := procstack.Build(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(bins.Broker)
	c, err := parseFlags([]string{"-postgres", pg, "-redis", rd, "-growth-only", "-bin", dir, "-duration", "500ms",
		"-providers", "2", "-callers", "2", "-q"}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	c.statsSettle = 1200 * time.Millisecond
	var out bytes.Buffer
	rep, err := Run(context.Background(), c, &out)
	if err != nil {
		t.Fatal(err)
	}
	if g := rep.Growth; g == nil || len(g.Doors) != 2 {
		t.Fatalf("growth: %+v", rep.Growth)
	}
	for _, d := range rep.Growth.Doors {
		if d.Completed == 0 || d.Failed != 0 || d.DoorsCPUPerRun <= 0 || d.BrokerCPUPerRun <= 0 || d.TxPerRun <= 0 {
			t.Fatalf("%s door: %+v", d.Door, d)
		}
	}
	if !strings.Contains(out.String(), "| doors CPU ms/run | doors + broker + PostgreSQL CPU ms/run |") {
		t.Fatalf("table without the doors' own CPU:\n%s", out.String())
	}
}

// The doors' log handler keeps the time of each "run queued" by run id,
// at Info even when the handler it wraps is quieter, and passes every
// record on to that handler as before.
func TestAcceptHandler(t *testing.T) {
	var buf bytes.Buffer
	acc := &accepted{}
	log := slog.New(newAcceptHandler(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}), acc))
	before := time.Now()
	log.Info("run queued", "run_id", "r-1", "thread_id", "t-1")
	log.Info("paused run reopened", "run_id", "r-2")
	log.Debug("run queued", "run_id", "r-3")
	log.With("thread_id", "t-4").Info("run queued", "run_id", "r-4")
	log.With("run_id", "r-5").Info("run queued")
	log.Warn("retrying transaction", "op", "create run")
	if n := acc.len(); n != 3 {
		t.Fatalf("%d runs recorded, want 3 (r-1, r-4, r-5)", n)
	}
	for _, id := range []string{"r-1", "r-4", "r-5"} {
		at, ok := acc.take(id)
		if !ok || at.Before(before) || at.After(time.Now()) {
			t.Fatalf("%s: %v %v", id, at, ok)
		}
	}
	if _, ok := acc.take("r-1"); ok || acc.len() != 0 {
		t.Fatal("take did not forget the run")
	}
	if got := buf.String(); !strings.Contains(got, "retrying transaction") || strings.Contains(got, "run queued") || strings.Contains(got, "reopened") {
		t.Fatalf("passed on (Warn and up only, as the wrapped handler wants):\n%s", got)
	}

	buf.Reset()
	log = slog.New(newAcceptHandler(slog.NewTextHandler(&buf, nil), acc)).WithGroup("g")
	log.Info("run queued", "run_id", "r-6")
	if _, ok := acc.take("r-6"); !ok || !strings.Contains(buf.String(), "g.run_id=r-6") {
		t.Fatalf("with an Info handler in a group: recorded %v, passed on %q", ok, buf.String())
	}

	acc.put("old", time.Now().Add(-2*time.Minute))
	acc.put("new", time.Now())
	acc.prune(time.Minute)
	if _, ok := acc.take("old"); ok {
		t.Fatal("prune kept an old entry")
	}
	if _, ok := acc.take("new"); !ok {
		t.Fatal("prune dropped a new entry")
	}
	if newAcceptHandler(slog.DiscardHandler, acc).Enabled(context.Background(), slog.LevelDebug) {
		t.Fatal("Debug enabled over a discarding handler")
	}
}
