package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/broker-node/lease"
	"github.com/funduq/funduq-go/broker-node/node"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/redisbound"
	"github.com/funduq/funduq-go/core/redislog"
	"github.com/funduq/funduq-go/core/store"
)

const leaseUsage = `usage: broker-node lease status [--json]
       broker-node lease handover [--wait DURATION]

status    who leads, under which epoch, its advertised URL and the lease's time left, and
          how long ago its PostgreSQL heartbeat lapsed when it has
handover  ask the leader to hand the lease over (it tells its providers to reconnect,
          releases the lease, and a standby takes it); waits until another node leads,
          and fails when none does (the leader takes the lease back after a cool-off)
`

// leaseStatus is what `lease status` prints.
//
// Leading is true only while the lease holder has taken the current epoch:
// between a takeover of the lease and its epoch (a holder that cannot reach
// PostgreSQL yet) nobody's writes land (D10), so nobody leads. Node is the
// lease holder either way; EpochNode names whose the epoch still is then.
type leaseStatus struct {
	Leading      bool   `json:"leading"`
	Node         string `json:"node,omitempty"`
	EpochNode    string `json:"epochNode,omitempty"`
	Epoch        int64  `json:"epoch"`
	AdvertiseURL string `json:"advertiseUrl,omitempty"`
	LeaseLeftMS  int64  `json:"leaseLeftMs,omitempty"`
	Since        string `json:"since,omitempty"`
	// HeartbeatStaleMS, while a node leads, is how long ago its PostgreSQL
	// heartbeat lapsed (0: current). A leader that cannot reach PostgreSQL
	// but renews its lease in Redis leads in name only: it takes no run
	// while a standby that reaches both waits (README "Failing the lease
	// over").
	HeartbeatStaleMS int64 `json:"heartbeatStaleMs,omitempty"`
}

// heartbeatStale is how long ago the heartbeat of epoch lapsed, in
// milliseconds; 0 while it is current. A heartbeat of an older epoch (a
// leader that has not written one yet) counts from a second after the
// takeover: a leader writes its first at once.
func heartbeatStale(ctx context.Context, st *store.Store, epoch int64) (int64, error) {
	var ms float64
	err := st.Pool().QueryRow(ctx, `SELECT GREATEST(0, 1000 * EXTRACT(EPOCH FROM now() -
			CASE WHEN h.epoch = $1 THEN h.alive_until ELSE l.acquired_at + interval '1 second' END))
		FROM broker_heartbeat h, broker_leader l WHERE h.id = 1 AND l.id = 1`, epoch).Scan(&ms)
	if err != nil {
		return 0, fmt.Errorf("read the leader's heartbeat: %w", err)
	}
	return int64(ms), nil
}

func leaseCmd(ctx context.Context, args []string, environ map[string]string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, leaseUsage)
		return errUsage
	}
	// Read the whole command line before touching a store: a typo must
	// be refused, not turned into a status in the wrong format or a
	// handover with the default wait.
	fs := flag.NewFlagSet("lease "+args[0], flag.ContinueOnError)
	fs.SetOutput(io.Discard) // its errors are printed below, once, with the usage
	asJSON := false
	wait := 30 * time.Second
	switch args[0] {
	case "status":
		fs.BoolVar(&asJSON, "json", false, "print the status as JSON")
	case "handover":
		fs.Var((*durationFlag)(&wait), "wait", "how long to wait for another epoch to lead")
	case "help", "-h", "--help":
		fmt.Fprint(stdout, leaseUsage)
		return nil
	default:
		fmt.Fprintf(stderr, "broker-node lease: unknown command %q\n\n%s", args[0], leaseUsage)
		return errUsage
	}
	refuse := func(format string, a ...any) error {
		fmt.Fprintf(stderr, "broker-node lease %s: %s\n\n%s", args[0], fmt.Sprintf(format, a...), leaseUsage)
		return errUsage
	}
	if err := fs.Parse(args[1:]); errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, leaseUsage)
		return nil
	} else if err != nil {
		return refuse("%v", err)
	}
	if fs.NArg() > 0 {
		return refuse("unexpected argument %q", fs.Arg(0))
	}
	if wait <= 0 {
		return refuse("-wait: want a duration above 0 (e.g. 30s), got %s", wait)
	}
	cfg, err := config.ParseLeaseTool(environ)
	if err != nil {
		return err
	}
	st, err := store.Open(ctx, cfg.DatabaseURL, store.Options{MaxConns: 2})
	if err != nil {
		return err
	}
	defer st.Close()
	ropt, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		return fmt.Errorf("FUNDUQ_REDIS_URL: %w", err)
	}
	// Contexts bound every Redis call, each at redisbound.Slack: without
	// this go-redis keeps its own read timeout (none with read_timeout=0),
	// and the tool would wait for ever on a hung Redis (design.md §A hung
	// Redis).
	ropt.ContextTimeoutEnabled = true
	// One dial and no command retry: go-redis's own (five dials, three
	// retries) outlast that bound, and the operator read "context deadline
	// exceeded" instead of the refusal. A person runs this tool again.
	ropt.DialerRetries, ropt.MaxRetries = 1, -1
	// The error below says what go-redis would print besides, as text
	// lines ahead of it.
	redislog.Use(nil)
	rdb := redis.NewClient(ropt)
	// inRedis names the setting and the address of a failed Redis call.
	inRedis := func(err error) error {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("reach Redis at %s (FUNDUQ_REDIS_URL): no answer within %s: %w", ropt.Addr, redisbound.Slack, err)
		}
		return fmt.Errorf("reach Redis at %s (FUNDUQ_REDIS_URL): %w", ropt.Addr, err)
	}
	defer rdb.Close()
	prefix := cfg.RedisPrefix
	status := func() (leaseStatus, error) {
		l, err := st.CurrentLeader(ctx)
		if err != nil {
			return leaseStatus{}, err
		}
		s := leaseStatus{Epoch: l.Epoch}
		rctx, cancel := redisbound.Call(ctx)
		defer cancel()
		h, err := lease.ReadHolder(rctx, rdb, node.LeaseKey(prefix))
		if errors.Is(err, lease.ErrNoHolder) {
			return s, nil
		}
		if err != nil {
			return leaseStatus{}, inRedis(err)
		}
		s.Node, s.LeaseLeftMS = h.NodeID, h.Left.Milliseconds()
		if h.NodeID == l.Holder {
			s.Leading, s.AdvertiseURL, s.Since = true, l.AdvertiseURL, l.AcquiredAt.UTC().Format(time.RFC3339)
			if s.HeartbeatStaleMS, err = heartbeatStale(ctx, st, l.Epoch); err != nil {
				return leaseStatus{}, err
			}
		} else {
			s.EpochNode = l.Holder
		}
		return s, nil
	}
	if args[0] == "status" {
		s, err := status()
		if err != nil {
			return err
		}
		if asJSON {
			return json.NewEncoder(stdout).Encode(s)
		}
		if s.Node == "" {
			fmt.Fprintf(stdout, "nobody holds the lease (last epoch %d): runs wait queued until a node takes it\n", s.Epoch)
			return nil
		}
		if !s.Leading {
			fmt.Fprintf(stdout, "nobody leads: %s holds the lease (%s left) and has not taken an epoch yet; epoch %d is %s's, "+
				"whose writes are fenced. Runs wait queued until the holder takes an epoch, or gives the lease up "+
				"after FUNDUQ_STORE_RETRY_FOR\n", s.Node, (time.Duration(s.LeaseLeftMS) * time.Millisecond).String(), s.Epoch, s.EpochNode)
			return nil
		}
		fmt.Fprintf(stdout, "leader:    %s\nepoch:     %d\nadvertise: %s\nsince:     %s\nlease:     %s left\n",
			s.Node, s.Epoch, s.AdvertiseURL, s.Since, (time.Duration(s.LeaseLeftMS) * time.Millisecond).String())
		if s.HeartbeatStaleMS > 0 {
			fmt.Fprintf(stdout, "heartbeat: lapsed %s ago: %s holds the lease but has not written its heartbeat to "+
				"PostgreSQL since, so every agent reads offline; if its /readyz says \"database\": \"unreachable\", "+
				"it takes no run either: hand over (lease handover) to a standby that reaches both stores\n",
				(time.Duration(s.HeartbeatStaleMS) * time.Millisecond).String(), s.Node)
		}
		return nil
	}
	before, err := status()
	if err != nil {
		return err
	}
	// A holder that has not taken an epoch yet can be asked too: it gives
	// the lease up, and a standby that reaches PostgreSQL may take it.
	if before.Node == "" {
		return errors.New("nobody holds the lease: there is nothing to hand over")
	}
	pctx, cancel := redisbound.Call(ctx)
	_, err = lease.RequestHandover(pctx, rdb, node.LeaseChannel(prefix))
	cancel()
	if err != nil {
		return fmt.Errorf("ask for a lease handover: %w", inRedis(err))
	}
	if before.Leading {
		fmt.Fprintf(stdout, "asked %s (epoch %d) to hand over\n", before.Node, before.Epoch)
	} else {
		fmt.Fprintf(stdout, "asked %s (holding the lease without an epoch) to hand over\n", before.Node)
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		// An interrupt (Ctrl-C, SIGTERM) ends the wait, not the handover:
		// the request is out, so the operator is told to look.
		select {
		case <-ctx.Done():
			return fmt.Errorf("interrupted while waiting for a new leader: %s (epoch %d) was asked to hand over and may still; see `lease status`",
				before.Node, before.Epoch)
		case <-deadline.C:
			return fmt.Errorf("no new leader within %s (is a standby running?)", wait)
		case <-tick.C:
		}
		s, err := status()
		if err == nil && s.Leading && s.Epoch > before.Epoch {
			if s.Node == before.Node {
				// No standby took the lease, and the node took it back
				// after its cool-off: stopping its host now would leave
				// nobody leading for a lease TTL.
				return fmt.Errorf("no standby took the lease: %s took it back (epoch %d); start a standby that reaches "+
					"PostgreSQL and Redis, then hand over again", s.Node, s.Epoch)
			}
			fmt.Fprintf(stdout, "%s leads now, epoch %d\n", s.Node, s.Epoch)
			return nil
		}
	}
}
