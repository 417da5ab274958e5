// Command load measures funduq-go on a local stack with real PostgreSQL,
// Redis and WebSockets, always beside the floors measured in the same run:
//
//	go run ./scripts/load --help
//	go run ./scripts/load -duration 10s -providers 4 -callers 8 -json load.json
//
// It starts a stack of its own (internal/procstack: a fresh database, a
// Redis key prefix, a broker node as a child process; the doors in this
// process) unless
// -broker and -doors name running ones, then:
//
//  1. floors: PostgreSQL insert+NOTIFY transactions/s and the NOTIFY round
//     trip (on a scratch table), and a WebSocket loopback round trip;
//  2. load: N SDK providers (accept at once; -events events of -event-size
//     bytes per run) and M callers through the AG-UI and A2A doors, for
//     -duration, closed loop: completed runs/s, dispatch latency from the
//     door accepting the run (its store's "run queued", logged once the run
//     is committed) and from the caller's send, both to the run frame at
//     the provider, event latency (provider emits → caller's SSE);
//  3. half load: the same at half the measured rate, open loop (dispatch
//     latency at half of the maximum load); -sweep adds more fractions and
//     -svg draws latency against load;
//  4. stream: one run streaming -stream events, provider → caller, every one
//     checked in run_events;
//  5. growth: ANALYZE after priming, then each door alone (AG-UI, then
//     A2A), closed loop: runs/s, committed transactions, PostgreSQL rows
//     read and CPU per run; with -preseed N the same again after N prior
//     runs of history are written in SQL and VACUUM (ANALYZE)d, as
//     autovacuum would have done by then;
//  6. idle links (-links n): n provider links held open to the broker node,
//     its memory per link and its CPU at idle.
//
// With -compare DIR,DIR[,…] it measures the growth section of each build
// folder in turn, -rounds times over, and prints each door's CPU per run per
// round, the means and their ratio to the first build (before and after in
// one sitting).
//
// It prints a table and writes it as JSON (-json). -doc rewrites the table
// between the markers in docs/performance.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Config is one load run's settings.
type Config struct {
	PostgresURL string // a superuser that may CREATE DATABASE (own stack) or the stack's database
	RedisURL    string
	BrokerURL   string // targets a running broker node instead of starting one
	DoorsURL    string
	DatabaseURL string // with -broker: the stack's database (floors and checks)

	Duration  time.Duration
	Providers int
	Callers   int
	A2AShare  float64 // fraction of callers using the A2A door
	Events    int     // events per run, RUN_STARTED and RUN_FINISHED included
	EventSize int     // bytes of payload per middle event
	Sweep     []float64
	Stream    int // events in the one-run stream test (0: skip)
	Links     int // idle links (0: skip)
	Preseed   int // prior runs of history written in SQL for the growth section (0: none)
	// GrowthOnly measures the growth section alone (no floors, load
	// phases or stream): each door's transactions, rows and CPU per run.
	GrowthOnly bool
	LinkKeys   int // provider keys the idle links use (0: one per link)
	FloorTime  time.Duration
	JSONPath   string
	SVGPath    string
	DocPath    string
	ProfileDir string // CPU profiles of the broker node and this process under load
	// BinDir holds a broker-node and a doors-local binary (built from any
	// checkout) to run as the stack instead of this binary and in-process
	// doors: the doors' CPU is then measured apart, and another build can
	// be measured with this tool.
	BinDir string
	// Compare holds two or more build folders (each as BinDir) measured
	// in turn, Rounds times over, in one sitting (compare.go).
	Compare []string
	Rounds  int
	Quiet   bool

	idleWindow  time.Duration // how long idle links are watched for CPU (10s)
	statsSettle time.Duration // the growth readings' wait for statistics (defaultStatsSettle)
}

func defaults() Config {
	return Config{
		PostgresURL: envOr("FUNDUQ_LOAD_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"),
		RedisURL:    envOr("FUNDUQ_LOAD_REDIS_URL", "redis://127.0.0.1:6379/0"),
		Duration:    10 * time.Second, Providers: 4, Callers: 8, A2AShare: 0.25, Events: 4, EventSize: 64,
		Stream: 20000, FloorTime: 3 * time.Second, Rounds: 3,
	}
}

func envOr(k, d string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return d
}

func main() {
	if os.Getenv(roleEnv) == "broker" {
		os.Exit(brokerChild())
	}
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if err == flag.ErrHelp {
		os.Exit(0)
	}
	if err != nil {
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(cfg.Compare) > 0 {
		_, err = runSitting(ctx, cfg, cfg.Compare, cfg.Rounds, os.Stdout)
	} else {
		_, err = Run(ctx, cfg, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string, out io.Writer) (Config, error) {
	c := defaults()
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintln(out, "usage: go run ./scripts/load [flags]\n\nDrives a local funduq-go stack and reports figures beside the floors measured in the same run.\n\nflags:")
		fs.PrintDefaults()
	}
	fs.StringVar(&c.PostgresURL, "postgres", c.PostgresURL, "PostgreSQL superuser DSN; the tool creates (and drops) a database of its own (env FUNDUQ_LOAD_POSTGRES_URL)")
	fs.StringVar(&c.RedisURL, "redis", c.RedisURL, "Redis URL (env FUNDUQ_LOAD_REDIS_URL)")
	fs.StringVar(&c.BrokerURL, "broker", "", "target this running broker node (http://host:port) instead of starting one; needs -doors and -database")
	fs.StringVar(&c.DoorsURL, "doors", "", "target these running doors (http://host:port)")
	fs.StringVar(&c.DatabaseURL, "database", "", "with -broker: the stack's PostgreSQL DSN")
	fs.DurationVar(&c.Duration, "duration", c.Duration, "length of each load phase")
	fs.IntVar(&c.Providers, "providers", c.Providers, "SDK providers (one key each, one agent each)")
	fs.IntVar(&c.Callers, "callers", c.Callers, "concurrent callers")
	fs.Float64Var(&c.A2AShare, "a2a", c.A2AShare, "share of callers that use the A2A door (the rest use AG-UI)")
	fs.IntVar(&c.Events, "events", c.Events, "events per run, RUN_STARTED and RUN_FINISHED included (≥ 2)")
	fs.IntVar(&c.EventSize, "event-size", c.EventSize, "payload bytes of each event between RUN_STARTED and RUN_FINISHED")
	sweep := fs.String("sweep", "", "comma-separated fractions of the maximum rate to measure dispatch latency at (e.g. 0.1,0.25,0.5,0.75,0.9); 0.5 is always measured")
	fs.IntVar(&c.Stream, "stream", c.Stream, "events in the one-run stream test (0 skips it)")
	fs.IntVar(&c.Preseed, "preseed", 0, "prior runs (2 messages, 3 events each) written in SQL after the doors are measured alone at 0 history, to measure them again at that history (1,000,000 messages: 500000)")
	fs.BoolVar(&c.GrowthOnly, "growth-only", false, "measure only the growth section (each door alone: runs/s, transactions, rows read and CPU per run), no floors, load phases or stream")
	fs.IntVar(&c.Links, "links", 0, "idle provider links to open for the memory-per-link test (0 skips it; 10000 is the target)")
	fs.IntVar(&c.LinkKeys, "link-keys", 0, "provider keys the idle links spread over (0: a key per link)")
	fs.DurationVar(&c.FloorTime, "floor-time", c.FloorTime, "time spent measuring each floor")
	fs.StringVar(&c.JSONPath, "json", "", "write the report as JSON to this file")
	fs.StringVar(&c.SVGPath, "svg", "", "write the latency-against-load chart (SVG) to this file")
	fs.StringVar(&c.DocPath, "doc", "", "rewrite the table between <!-- load:begin --> and <!-- load:end --> in this file")
	fs.StringVar(&c.ProfileDir, "profile", "", "write CPU profiles of the broker node and of this process (doors, providers, callers) under load to this folder")
	fs.StringVar(&c.BinDir, "bin", "", "run the stack from DIR/broker-node and DIR/doors-local (go build -o DIR/broker-node ./broker-node; go build -o DIR/doors-local ./functions/local, from any checkout) instead of this binary: the doors run in a process of their own and their CPU is measured apart; needs -growth-only")
	compare := fs.String("compare", "", "DIR,DIR[,…]: measure the growth section of each build folder (as -bin) in turn, -rounds times over, alternating, and print each door's CPU per run (doors + broker + PostgreSQL) per round, the means and their ratio to the first build: before and after in one sitting")
	fs.IntVar(&c.Rounds, "rounds", c.Rounds, "rounds of -compare")
	fs.BoolVar(&c.Quiet, "q", false, "no progress on stderr")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		fmt.Fprintln(out, "unexpected arguments:", fs.Args())
		return c, fmt.Errorf("unexpected arguments")
	}
	if *sweep != "" {
		for _, f := range strings.Split(*sweep, ",") {
			v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
			if err != nil || v <= 0 || v > 1.5 {
				fmt.Fprintln(out, "-sweep: want fractions in (0, 1.5]:", f)
				return c, fmt.Errorf("bad -sweep")
			}
			c.Sweep = append(c.Sweep, v)
		}
	}
	if c.Events < 2 || c.Providers < 1 || c.Callers < 1 || c.Duration <= 0 || c.Preseed < 0 {
		fmt.Fprintln(out, "-events ≥ 2, -providers ≥ 1, -callers ≥ 1, -duration > 0 and -preseed ≥ 0 are needed")
		return c, fmt.Errorf("bad flags")
	}
	if c.GrowthOnly && c.BrokerURL != "" {
		fmt.Fprintln(out, "-growth-only needs the tool's own stack (no -broker)")
		return c, fmt.Errorf("bad flags")
	}
	if *compare != "" {
		for _, d := range strings.Split(*compare, ",") {
			if d = strings.TrimSpace(d); d != "" {
				c.Compare = append(c.Compare, d)
			}
		}
		if len(c.Compare) < 2 || c.Rounds < 1 || c.BinDir != "" || c.BrokerURL != "" || c.SVGPath != "" || c.DocPath != "" {
			fmt.Fprintln(out, "-compare wants two or more build folders, -rounds ≥ 1, the tool's own stack, and no -bin, -svg or -doc")
			return c, fmt.Errorf("bad -compare")
		}
		c.GrowthOnly = true
	}
	if c.BinDir != "" && (!c.GrowthOnly || c.BrokerURL != "") {
		fmt.Fprintln(out, "-bin needs -growth-only and the tool's own stack (no -broker)")
		return c, fmt.Errorf("bad flags")
	}
	if (c.BrokerURL == "") != (c.DoorsURL == "") || (c.BrokerURL != "" && c.DatabaseURL == "") {
		fmt.Fprintln(out, "-broker, -doors and -database go together")
		return c, fmt.Errorf("bad flags")
	}
	return c, nil
}
