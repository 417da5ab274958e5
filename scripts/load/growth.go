package main

import (
	"context"
	"crypto/ed25519"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx" for preseed
	"golang.org/x/sys/unix"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/store/preseed"
)

// Growth is what a run costs per door with and without history: each door
// alone at 0 prior runs and, with -preseed N, at N prior runs written in
// SQL, the database ANALYZEd before each (issue 20).
type Growth struct {
	PreseedRuns    int           `json:"preseed_runs"`
	SeedSeconds    float64       `json:"seed_seconds,omitempty"`
	AnalyzeSeconds float64       `json:"analyze_seconds"`
	Doors          []DoorFigures `json:"doors"`
}

// DoorFigures is one door's closed-loop phase at one size of history. The
// PostgreSQL figures are deltas of pg_stat_database (this database's
// committed transactions) and pg_stat_user_tables (rows read: sequential
// scans' rows plus index fetches) over the phase; CPU is from /proc (the
// broker node's process and this database's backends) and getrusage (this
// process: the doors, the callers and the providers together).
type DoorFigures struct {
	Door            string  `json:"door"`
	PriorRuns       int64   `json:"prior_runs"`
	PriorMessages   int64   `json:"prior_messages"`
	Seconds         float64 `json:"seconds"`
	Completed       int64   `json:"completed"`
	Failed          int64   `json:"failed"`
	RunsPerSec      float64 `json:"runs_per_s"`
	TxPerRun        float64 `json:"committed_tx_per_run"`
	RowsReadPerRun  float64 `json:"rows_read_per_run"`
	PGCPUPerRun     float64 `json:"postgres_cpu_ms_per_run"`
	BrokerCPUPerRun float64 `json:"broker_cpu_ms_per_run"`
	SelfCPUPerRun   float64 `json:"load_process_cpu_ms_per_run"`
	// DoorsCPUPerRun is the doors' process's, when they run apart (-bin);
	// the load process is then the callers and providers alone.
	DoorsCPUPerRun float64 `json:"doors_cpu_ms_per_run,omitempty"`
}

// pgCounters is one reading of this database's statistics.
type pgCounters struct {
	commits  int64
	rowsRead int64
	cpu      map[int]time.Duration // backend pid → CPU used so far
}

// defaultStatsSettle is how long a reading waits for idle backends to flush
// their statistics. A backend flushes at most once a second, and one that
// goes idle less than a second after its last flush holds the rest until
// its idle timeout, 10 s later (PGSTAT_IDLE_INTERVAL): a reading taken
// sooner misses the end of the phase just run and counts it in the next.
const defaultStatsSettle = 10500 * time.Millisecond

func readCounters(ctx context.Context, conn *pgx.Conn) (pgCounters, error) {
	var c pgCounters
	if err := conn.QueryRow(ctx, `SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`).Scan(&c.commits); err != nil {
		return c, fmt.Errorf("pg_stat_database: %w", err)
	}
	if err := conn.QueryRow(ctx, `SELECT coalesce(sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)), 0)::bigint
		FROM pg_stat_user_tables`).Scan(&c.rowsRead); err != nil {
		return c, fmt.Errorf("pg_stat_user_tables: %w", err)
	}
	rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`)
	if err != nil {
		return c, err
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return c, err
	}
	c.cpu = map[int]time.Duration{}
	for _, p := range pids {
		if d, ok := procCPU(int(p)); ok {
			c.cpu[int(p)] = d
		}
	}
	return c, nil
}

// procCPU is a process's user+system CPU so far, read from its CPU-time
// clock (clock_gettime on the pid's process clock: nanoseconds, every
// thread of it, those ended too). /proc/<pid>/stat counts 10 ms ticks, so a
// short phase on a busy machine could read a process that did work as 0
// (TestGrowthOfABuild saw the doors at 0 ms for 9 runs); it is the
// fallback where the clock cannot be read.
func procCPU(pid int) (time.Duration, bool) {
	// make_process_cpuclock(pid, CPUCLOCK_SCHED) in the kernel's
	// posix-timers: ^pid << 3, the scheduler's clock (2), process-wide.
	clk := (^int32(pid))<<3 | 2
	var ts unix.Timespec
	if err := unix.ClockGettime(clk, &ts); err == nil {
		return time.Duration(ts.Nano()), true
	}
	return procStatCPU(pid)
}

// procStatCPU is procCPU from /proc/<pid>/stat, in 10 ms ticks.
func procStatCPU(pid int) (time.Duration, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, false
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	const ticks = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / ticks, true
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// analyze runs ANALYZE on the stack's database, as a production database
// (autovacuum) would have by now, and returns how long it took.
func analyze(ctx context.Context, dbURL string) (time.Duration, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	t0 := time.Now()
	if _, err := conn.Exec(ctx, `ANALYZE`); err != nil {
		return 0, fmt.Errorf("analyze: %w", err)
	}
	return time.Since(t0), nil
}

// checkpoint runs CHECKPOINT (a superuser's, or pg_checkpoint's).
func checkpoint(ctx context.Context, dbURL string) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, `CHECKPOINT`)
	return err
}

// preseedHistory writes n prior runs (and their messages and events) in
// SQL, spread over the fleet's agents "load".
func preseedHistory(ctx context.Context, dbURL string, keys []string, n int) error {
	db, err := sql.Open("pgx", dbURL)
	if err != nil {
		return err
	}
	defer db.Close()
	for i, k := range keys {
		share := n / len(keys)
		if i < n%len(keys) {
			share++
		}
		pub, err := hex.DecodeString(k)
		if err != nil || len(pub) != ed25519.PublicKeySize {
			return fmt.Errorf("preseed: provider key %q", k)
		}
		if err := preseed.Seed(ctx, db, preseed.Options{Runs: share, ProviderKey: k,
			Fingerprint: identity.Fingerprint(ed25519.PublicKey(pub)), AgentName: "load",
			Prefix: "preseed-" + strconv.Itoa(i)}); err != nil {
			return err
		}
	}
	return nil
}

// doorPhase runs the callers of one door alone, closed loop, for d and
// reads what it cost.
func doorPhase(ctx context.Context, f *fleet, st *stack, callers []*caller, door string, d, statsSettle time.Duration) (DoorFigures, error) {
	fig := DoorFigures{Door: door}
	if statsSettle <= 0 {
		statsSettle = defaultStatsSettle
	}
	conn, err := pgx.Connect(ctx, st.dbURL)
	if err != nil {
		return fig, err
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM runs), (SELECT count(*) FROM thread_messages)`).
		Scan(&fig.PriorRuns, &fig.PriorMessages); err != nil {
		return fig, err
	}
	time.Sleep(statsSettle)
	before, err := readCounters(ctx, conn)
	if err != nil {
		return fig, err
	}
	broker0, _ := procCPU(st.brokerPID)
	doors0, _ := procCPU(st.doorsPID)
	self0 := selfCPU()
	p, took := f.closedLoop(ctx, callers, d)
	self1 := selfCPU()
	doors1, _ := procCPU(st.doorsPID)
	broker1, _ := procCPU(st.brokerPID)
	time.Sleep(statsSettle)
	after, err := readCounters(ctx, conn)
	if err != nil {
		return fig, err
	}
	fig.Seconds, fig.Completed, fig.Failed = took.Seconds(), p.done.Load(), p.failed.Load()
	fig.RunsPerSec = float64(fig.Completed) / took.Seconds()
	if fig.Completed == 0 {
		return fig, fmt.Errorf("%s door: no run completed (%d failed)", door, fig.Failed)
	}
	runs := float64(fig.Completed)
	// The reading connection's own transactions (three per reading) are
	// not the door's.
	fig.TxPerRun = float64(after.commits-before.commits-3) / runs
	fig.RowsReadPerRun = float64(after.rowsRead-before.rowsRead) / runs
	var pg time.Duration
	for pid, t1 := range after.cpu {
		pg += t1 - before.cpu[pid] // a backend that started during the phase counts from 0
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / runs }
	fig.PGCPUPerRun, fig.SelfCPUPerRun = ms(pg), ms(self1-self0)
	if st.brokerPID > 0 {
		fig.BrokerCPUPerRun = ms(broker1 - broker0)
	}
	if st.doorsPID > 0 {
		fig.DoorsCPUPerRun = ms(doors1 - doors0)
	}
	return fig, nil
}

// measureGrowth is the growth section: ANALYZE after priming, each door
// alone at the history there is, then (n > 0) n prior runs seeded,
// VACUUM (ANALYZE)d and checkpointed, and each door again.
func measureGrowth(ctx context.Context, c Config, f *fleet, st *stack, logf func(string, ...any)) (*Growth, error) {
	g := &Growth{PreseedRuns: c.Preseed}
	took, err := analyze(ctx, st.dbURL)
	if err != nil {
		return nil, err
	}
	g.AnalyzeSeconds = took.Seconds()
	phases := func() error {
		for _, door := range []string{"agui", "a2a"} {
			logf("growth: %s door alone, %d callers, %s", door, c.Callers, c.Duration)
			fig, err := doorPhase(ctx, f, st, c.callersOf(st.doorsURL, door == "a2a"), door, c.Duration, c.statsSettle)
			if err != nil {
				return err
			}
			g.Doors = append(g.Doors, fig)
		}
		return nil
	}
	if err := phases(); err != nil {
		return nil, err
	}
	if c.Preseed <= 0 {
		return g, nil
	}
	logf("growth: preseeding %d prior runs (%d messages, %d events) in SQL", c.Preseed,
		c.Preseed*preseed.MessagesPerRun, c.Preseed*preseed.EventsPerRun)
	t0 := time.Now()
	if err := preseedHistory(ctx, st.dbURL, f.keys, c.Preseed); err != nil {
		return nil, err
	}
	g.SeedSeconds = time.Since(t0).Seconds()
	if err := vacuum(ctx, st.dbURL); err != nil {
		return nil, err
	}
	// The seed's pages, and those the vacuum dirtied (hint bits, the
	// visibility map, frozen tuples), go to disk now, not under the next
	// phases: a checkpoint writing millions of fresh rows is no part of a
	// run's cost.
	if err := checkpoint(ctx, st.dbURL); err != nil {
		logf("growth: checkpoint after the seed: %v (the next phases may share the disk with it)", err)
	}
	if err := phases(); err != nil {
		return nil, err
	}
	return g, nil
}

// vacuum runs VACUUM (ANALYZE) on the stack's database after the seed, as
// autovacuum would have by now on a production database holding that
// history: the seed's rows are frozen into the visibility map and their
// hint bits set, so the phases after it do not pay for the seed's first
// reads.
func vacuum(ctx context.Context, dbURL string) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `VACUUM (ANALYZE)`); err != nil {
		return fmt.Errorf("vacuum: %w", err)
	}
	return nil
}

// growthTable renders the growth section.
func growthTable(g *Growth) string {
	var b strings.Builder
	apart := len(g.Doors) > 0 && g.Doors[0].DoorsCPUPerRun > 0
	self := "load process CPU ms/run (doors, callers, providers)"
	if apart {
		self = "doors CPU ms/run | doors + broker + PostgreSQL CPU ms/run | load process CPU ms/run (callers, providers)"
	}
	head := "| door | prior runs | prior messages | runs/s | committed tx/run | rows read/run | PostgreSQL CPU ms/run | broker CPU ms/run | " + self + " | failed |\n"
	fmt.Fprintf(&b, "\n%s%s|\n", head, strings.Repeat("|---", strings.Count(head, "|")-1))
	for _, d := range g.Doors {
		fmt.Fprintf(&b, "| %s | %d | %d | %.1f | %.2f | %.1f | %.2f | %.2f | ", d.Door, d.PriorRuns, d.PriorMessages,
			d.RunsPerSec, d.TxPerRun, d.RowsReadPerRun, d.PGCPUPerRun, d.BrokerCPUPerRun)
		if apart {
			fmt.Fprintf(&b, "%.2f | %.2f | ", d.DoorsCPUPerRun, d.DoorsCPUPerRun+d.BrokerCPUPerRun+d.PGCPUPerRun)
		}
		fmt.Fprintf(&b, "%.2f | %d |\n", d.SelfCPUPerRun, d.Failed)
	}
	if g.PreseedRuns > 0 {
		fmt.Fprintf(&b, "\n%d prior runs seeded in SQL in %.1f s; ANALYZE after priming took %.2f s.\n", g.PreseedRuns, g.SeedSeconds, g.AnalyzeSeconds)
	}
	return b.String()
}
