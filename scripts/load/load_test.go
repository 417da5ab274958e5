package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) == "broker" { // the test binary is the broker node child
		os.Exit(brokerChild())
	}
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
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
		"-a2a", "0.5", "-stream", "200", "-links", "5", "-floor-time", "200ms", "-sweep", "0.25",
		"-json", filepath.Join(dir, "r.json"), "-svg", filepath.Join(dir, "c.svg"), "-doc", doc, "-q"}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	c.idleWindow = 500 * time.Millisecond
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
	if s := rep.Stream; s == nil || s.Read != 200 || s.Stored != 202 || s.StoredUnique != 202 {
		t.Fatalf("stream: %+v", rep.Stream)
	}
	if s := rep.Stream; s.StoreFloorPerSec <= 0 || s.StoreFloorBatch < 1 || s.StoreFloorBatch > s.Stored {
		t.Fatalf("store floor: %+v", s)
	}
	if rep.Idle == nil || rep.Idle.Opened != 5 {
		t.Fatalf("idle links: %+v", rep.Idle)
	}
	var back Report
	b, err := os.ReadFile(filepath.Join(dir, "r.json"))
	if err != nil || json.Unmarshal(b, &back) != nil || back.Max.Completed != rep.Max.Completed || len(back.Targets) == 0 {
		t.Fatalf("report JSON: %v\n%s", err, b)
	}
	svg, _ := os.ReadFile(filepath.Join(dir, "c.svg"))
	if !strings.HasPrefix(string(svg), "<svg") || !strings.HasSuffix(strings.TrimSpace(string(svg)), "</svg>") {
		t.Fatalf("chart: %.200s", svg)
	}
	d, _ := os.ReadFile(doc)
	if strings.Contains(string(d), "stale-table-placeholder") || !strings.Contains(string(d), "completed runs/s") || !strings.HasSuffix(string(d), docEnd+"\ntail\n") {
		t.Fatalf("doc:\n%s", d)
	}
	if !strings.Contains(out.String(), "dispatch") {
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
	if _, err := parseFlags([]string{"-broker", "http://x"}, &out); err == nil {
		t.Fatal("-broker without -doors was accepted")
	}
}
