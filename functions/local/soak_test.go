package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	runst "github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/wire"
)

// footprint is what a long-lived broker node and door server hold once
// everything has settled: it must not grow with the runs and links served.
type footprint struct {
	goroutines int
	fds        int
	pgConns    int
	pgInTx     int // connections idle inside an open transaction
	held       map[string]int
	redis      map[string]string // key (prefix dropped, ids folded) -> count and TTL
	redisKeys  int
	sockets    map[string]int // open sockets by remote port and TCP state
	// redisForever counts the keys with no TTL: the others expire.
	redisForever int
}

func (f footprint) String() string {
	keys := make([]string, 0, len(f.held))
	for k := range f.held {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "goroutines=%d fds=%d pg=%d redisKeys=%d", f.goroutines, f.fds, f.pgConns, f.redisKeys)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%d", k, f.held[k])
	}
	fmt.Fprintf(&b, "\n  sockets %v", f.sockets)
	rk := make([]string, 0, len(f.redis))
	for k := range f.redis {
		rk = append(rk, k)
	}
	sort.Strings(rk)
	for _, k := range rk {
		fmt.Fprintf(&b, "\n  redis %s: %s", k, f.redis[k])
	}
	return b.String()
}

// pooled counts the sockets to PostgreSQL and Redis.
func (f footprint) pooled() int {
	n := 0
	for k, v := range f.sockets {
		if strings.HasPrefix(k, "to :5432 ") || strings.HasPrefix(k, "to :6379 ") {
			n += v
		}
	}
	return n
}

// soakRuns is how many runs each phase drives: a few dozen for the test
// command, more under FUNDUQ_SOAK_RUNS.
func soakRuns(t *testing.T) int {
	if s := os.Getenv("FUNDUQ_SOAK_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 8 {
			t.Fatalf("FUNDUQ_SOAK_RUNS=%q: want a number >= 8", s)
		}
		return n
	}
	return 48
}

// A run costs the same on day one hundred as on day one: after phases of
// runs across both doors with the churn real life has (callers abandoning
// streams, cancels, paused runs left unanswered, links dropped without a
// close frame mid-run, links replaced by a newer link of their key), once
// the broker is idle and every link is gone, the process holds what it held
// after the first phase — goroutines, open files other than the pools' idle
// connections, no PostgreSQL transaction left open,
// every broker map keyed by run, link or key, and Redis keys.
func TestSoakReturnsToBaseline(t *testing.T) {
	n := soakRuns(t)
	// The links dropped mid-run count as abandoned runs against the key;
	// the soak's key is not to be withdrawn for them.
	h := nodetest.Start(t, func(c *config.Broker) { c.ProviderQualityTolerance = 1 << 20 })
	base := startDoors(t, h)
	opt, err := redis.ParseURL(h.Cfg.RedisURL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	s := &soak{t: t, h: h, base: base, http: client, seed: 0xe0}

	s.phase(n)
	first := s.settle(rdb)
	s.phase(n)
	s.phase(n)
	third := s.settle(rdb)
	t.Logf("after %d runs: %v", n, first)
	t.Logf("after %d runs: %v", 3*n, third)

	var grew []string
	for k, v := range third.held {
		if k == "ended" { // a ring of fixed size (broker/ended.go)
			continue
		}
		if v != 0 { // no link, no active lane, past the unserved window
			grew = append(grew, fmt.Sprintf("broker %s holds %d after settling", k, v))
		}
		if v > first.held[k] {
			grew = append(grew, fmt.Sprintf("broker %s %d -> %d", k, first.held[k], v))
		}
	}
	if third.redisForever > first.redisForever {
		grew = append(grew, fmt.Sprintf("redis keys without a TTL %d -> %d", first.redisForever, third.redisForever))
	}
	// The pools keep idle PostgreSQL connections up to their bounds (one
	// more after a busier phase is not a leak); a transaction left open is.
	if third.pgInTx > 0 {
		grew = append(grew, fmt.Sprintf("pg connections idle in a transaction: %d", third.pgInTx))
	}
	// The PostgreSQL and Redis pools keep idle connections up to their
	// bounds; every other descriptor must be back where it was.
	if o1, o3 := first.fds-first.pooled(), third.fds-third.pooled(); o3 > o1 {
		grew = append(grew, fmt.Sprintf("fds other than pooled connections %d -> %d", o1, o3))
	}
	if third.goroutines > first.goroutines {
		grew = append(grew, fmt.Sprintf("goroutines %d -> %d", first.goroutines, third.goroutines))
	}
	sort.Strings(grew)
	if len(grew) > 0 {
		t.Errorf("grew with the runs served:\n%s", strings.Join(grew, "\n"))
	}
}

type soak struct {
	t      *testing.T
	h      *nodetest.Harness
	base   string
	http   *http.Client
	rounds int
	links  int
	seed   byte // the provider key of this phase: each phase is a new key
}

// connect opens a new link of the soak's key. Tickets are rate-limited per
// key per minute of the node's clock; the clock moves a minute every few
// links, as it would between reconnects in real life.
func (s *soak) connect() *nodetest.Prov {
	s.links++
	if s.links%8 == 0 {
		s.h.Advance(time.Minute)
	}
	p := s.h.Connect(s.seed, nil)
	p.Register("echo")
	return p
}

// caller posts body to path and reads the stream; abandon hangs up after
// the first line. The returned wait joins it.
func (s *soak) caller(path, body string, abandon bool) (wait func()) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "text/event-stream")
		resp, err := s.http.Do(req)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		if abandon {
			_, _ = bufio.NewReader(resp.Body).ReadString('\n')
			cancel()
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
	})
	return wg.Wait
}

func (s *soak) start(p *nodetest.Prov, a2aDoor, abandon bool) (runID, thread string, wait func()) {
	s.rounds++
	if a2aDoor {
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"message/stream","params":{"message":{"kind":"message","messageId":"m%d","role":"user","parts":[{"kind":"text","text":"hi"}]}}}`, s.rounds)
		wait = s.caller("/a2a/"+p.Key+"/echo", body, abandon)
	} else {
		body := fmt.Sprintf(`{"threadId":"soak-t%d","runId":"soak-r%d","messages":[{"id":"u%d","role":"user","content":"hi"}]}`, s.rounds, s.rounds, s.rounds)
		wait = s.caller("/agui/"+p.Key+"/echo", body, abandon)
	}
	f := p.Offer()
	if f.ThreadID != nil {
		thread = *f.ThreadID
	}
	p.Accept(f.RunID)
	p.Event(f.RunID, fmt.Sprintf(`{"type":"RUN_STARTED","threadId":%q,"runId":%q}`, thread, f.RunID))
	return f.RunID, thread, wait
}

func (s *soak) terminal(id string) {
	s.t.Helper()
	s.h.Eventually("run "+id+" ends", func() bool { return s.h.Run(id).Status.Terminal() })
}

// phase drives n runs, cycling through the kinds of churn.
func (s *soak) phase(n int) {
	t, h := s.t, s.h
	s.seed++
	p := s.connect()
	for i := range n {
		a2aDoor := i%2 == 1
		switch i % 8 {
		case 0, 1: // played through, the caller reading to the end
			id, thread, wait := s.start(p, a2aDoor, false)
			p.Complete(id, thread)
			wait()
			h.WaitStatus(id, runst.Completed)
		case 2, 3: // the caller hangs up mid-run; the run goes on
			id, thread, wait := s.start(p, a2aDoor, true)
			wait()
			p.Complete(id, thread)
			h.WaitStatus(id, runst.Completed)
		case 4: // paused; the caller answers every other one, never the rest
			id, thread, wait := s.start(p, a2aDoor, false)
			p.Event(id, fmt.Sprintf(`{"type":"RUN_FINISHED","threadId":%q,"runId":%q,"outcome":{"type":"interrupt","interrupts":[{"id":"int_1","reason":"confirm"}]}}`, thread, id))
			p.Finish(id)
			wait()
			h.WaitStatus(id, runst.InputRequired)
			if (i/8)%2 == 1 { // every other one is answered, and runs to the end
				s.rounds++
				wait = s.caller("/agui/"+p.Key+"/echo", fmt.Sprintf(`{"threadId":%q,"runId":"soak-r%d","messages":[],"resume":[{"interruptId":"int_1","status":"resolved"}]}`, thread, s.rounds), false)
				f := p.Offer()
				p.Accept(f.RunID)
				p.Complete(f.RunID, thread)
				wait()
				h.WaitStatus(f.RunID, runst.Completed)
			}
		case 5: // cancelled at the A2A door mid-run
			id, _, wait := s.start(p, true, false)
			code, b := call(t, "POST", s.base+"/a2a/"+p.Key+"/echo", fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"tasks/cancel","params":{"id":%q}}`, id))
			if code != 200 {
				t.Fatalf("cancel %d %s", code, b)
			}
			p.Expect("cancel", nil)
			p.Finish(id)
			wait()
			s.terminal(id)
		case 6: // the link drops without a close frame mid-run; the key comes back
			id, _, wait := s.start(p, a2aDoor, false)
			p.Close()
			wait()
			s.terminal(id)
			p = s.connect()
		case 7: // a newer link of the key replaces the old one
			id, thread, wait := s.start(p, a2aDoor, false)
			p.Complete(id, thread)
			wait()
			h.WaitStatus(id, runst.Completed)
			old := p
			p = s.connect()
			// Told replaced and left open, offered nothing (design.md
			// §Two processes of one key): its process closes it.
			var e wire.Error
			old.Expect(wire.TypeError, &e)
			if e.Message != wire.ReplacedMessage {
				t.Fatalf("the replaced link told %+v", e)
			}
			old.Goodbye()
		}
	}
	p.Goodbye()
}

// settle waits for the barriers (no link, no run active, the broker idle)
// and then for what the process holds to stop shrinking, and measures it.
func (s *soak) settle(rdb *redis.Client) footprint {
	t, h := s.t, s.h
	h.Eventually("every link gone and no run active", func() bool {
		snap := h.Node.Broker.Snapshot()
		if snap.Links != 0 {
			return false
		}
		for _, st := range snap.Lanes {
			if !st.Terminal() && st != runst.InputRequired {
				return false
			}
		}
		return h.Node.Broker.Idle()
	})
	// Past the unserved timeout, as a long-lived node always is for keys
	// that left long ago.
	h.Advance(h.Cfg.UnservedTimeout + time.Minute)
	s.http.CloseIdleConnections()
	http.DefaultClient.CloseIdleConnections()
	// Goroutines of hung-up streams and closed links end a moment after
	// the barrier; take the lowest count seen over a short while.
	f := footprint{goroutines: runtime.NumGoroutine()}
	for range 100 {
		time.Sleep(10 * time.Millisecond)
		f.goroutines = min(f.goroutines, runtime.NumGoroutine())
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	f.fds = len(ents)
	f.sockets = sockets(ents)
	if err := h.DB().QueryRow(context.Background(), `SELECT count(*), count(*) FILTER (WHERE state LIKE 'idle in transaction%')
		FROM pg_stat_activity WHERE datname = current_database()`).Scan(&f.pgConns, &f.pgInTx); err != nil {
		t.Fatal(err)
	}
	f.held = h.Node.Broker.Held()
	f.redis = map[string]string{}
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, h.Prefix+"*", 1000).Iterator()
	counts := map[string]int{}
	ttls := map[string]string{}
	for iter.Next(ctx) {
		k := iter.Val()
		f.redisKeys++
		shape := foldIDs(strings.TrimPrefix(k, h.Prefix))
		counts[shape]++
		ttl, _ := rdb.TTL(ctx, k).Result()
		if ttl < 0 {
			f.redisForever++
			ttls[shape] = "no TTL"
		} else if ttls[shape] == "" {
			ttls[shape] = "ttl " + ttl.Round(time.Second).String()
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	for k, c := range counts {
		f.redis[k] = fmt.Sprintf("%d keys, %s", c, ttls[k])
	}
	return f
}

// foldIDs replaces the id-like and numeric segments of a Redis key with '*', so keys
// of one kind count together.
func foldIDs(k string) string {
	parts := strings.Split(k, ":")
	for i, p := range parts {
		if _, err := strconv.Atoi(p); err == nil || len(p) >= 12 || strings.HasPrefix(p, "soak-") {
			parts[i] = "*"
		}
	}
	return strings.Join(parts, ":")
}

// sockets sorts this process's open sockets by peer port and TCP state,
// from /proc/net/tcp: a leak names its peer.
func sockets(ents []os.DirEntry) map[string]int {
	inodes := map[string]bool{}
	for _, e := range ents {
		l, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	states := map[string]string{"01": "ESTABLISHED", "06": "TIME_WAIT", "08": "CLOSE_WAIT", "0A": "LISTEN", "04": "FIN_WAIT1", "05": "FIN_WAIT2"}
	out := map[string]int{}
	for _, file := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		b, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || !inodes[f[9]] {
				continue
			}
			local, remote := f[1], f[2]
			lp, _ := strconv.ParseInt(local[strings.LastIndex(local, ":")+1:], 16, 32)
			rp, _ := strconv.ParseInt(remote[strings.LastIndex(remote, ":")+1:], 16, 32)
			st := states[f[3]]
			if st == "" {
				st = f[3]
			}
			out[fmt.Sprintf("%d->%d %s", lp, rp, st)]++
		}
	}
	// fold ephemeral local ports
	folded := map[string]int{}
	for k, v := range out {
		var lp, rp int
		var st string
		fmt.Sscanf(k, "%d->%d %s", &lp, &rp, &st)
		if rp == 0 {
			folded[fmt.Sprintf("listen :%d", lp)] += v
		} else if rp == 5432 || rp == 6379 {
			folded[fmt.Sprintf("to :%d %s", rp, st)] += v
		} else if lp < 32768 {
			folded[fmt.Sprintf("from peer into :%d %s", lp, st)] += v
		} else {
			folded[fmt.Sprintf("to :%d %s", rp, st)] += v
		}
	}
	return folded
}
