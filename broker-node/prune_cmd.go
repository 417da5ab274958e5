package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/funduq/funduq-go/broker-node/retention"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/store"
)

const pruneUsage = `usage: broker-node prune --older-than DURATION (at least 1h, e.g. 720h) [--agents-older-than DURATION] [--dry-run] [--batch 1-10000]
       broker-node prune --agents-older-than DURATION (at least 1h, e.g. 168h) [--dry-run] [--batch 1-10000]

--older-than         delete settled runs (completed, failed, cancelled) that settled longer ago than this
--agents-older-than  delete the agents nobody has served for longer than this and no thread or run
                     names, and the providers left with no agent, offering or quality counters
--dry-run            print what would be deleted and delete nothing
--batch              runs, or provider keys, per transaction (default 500)
`

// pruneCmd is `broker-node prune --older-than D [--dry-run] [--batch N]`:
// the operator's run of what FUNDUQ_RETENTION has the leader do.
func pruneCmd(ctx context.Context, args []string, environ map[string]string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("prune", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // its errors are printed below, once, with the usage
	var olderThan, agentsOlderThan time.Duration
	fs.Var((*durationFlag)(&olderThan), "older-than", "delete settled runs that settled longer ago than this (e.g. 720h); at least 1h")
	fs.Var((*durationFlag)(&agentsOlderThan), "agents-older-than", "delete the records nobody has served for longer than this (e.g. 168h); at least 1h")
	dry := fs.Bool("dry-run", false, "print what would be deleted and delete nothing")
	batch := fs.Int("batch", 500, "runs per transaction")
	// Name the mistake before any store is touched, as lease does: the
	// operator is about to delete data.
	refuse := func(format string, a ...any) error {
		fmt.Fprintf(stderr, "broker-node prune: %s\n%s", fmt.Sprintf(format, a...), pruneUsage)
		return errUsage
	}
	err := fs.Parse(args)
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, pruneUsage)
		return nil
	case err != nil:
		return refuse("%v", err)
	case fs.NArg() > 0:
		return refuse("unexpected argument %q", fs.Arg(0))
	case !set["older-than"] && !set["agents-older-than"]:
		return refuse("--older-than is required (or --agents-older-than alone, for records only)")
	case set["older-than"] && olderThan < time.Hour:
		return refuse("--older-than %s is under 1h", olderThan)
	case set["agents-older-than"] && agentsOlderThan < time.Hour:
		return refuse("--agents-older-than %s is under 1h", agentsOlderThan)
	case *batch < 1 || *batch > 10000:
		return refuse("--batch %d is outside 1-10000", *batch)
	}
	cfg, err := config.ParseMigrate(environ)
	if err != nil {
		return err
	}
	log := newLogger(stderr, cfg.LogLevel)
	st, err := store.Open(ctx, cfg.DatabaseURL, store.Options{Log: log, MaxConns: 2})
	if err != nil {
		return err
	}
	defer st.Close()
	// The node's own check (a schema this binary was built for): on
	// another, a delete could fail halfway or miss what hangs off a run.
	if err := st.CheckSchema(ctx); err != nil {
		return err
	}
	// PostgreSQL's clock, which wrote the times the cutoff is compared
	// with: the operator's machine may keep another (design.md §Retention).
	now, err := st.Now(ctx)
	if err != nil {
		return err
	}
	cutoff, agentsCutoff := now.Add(-olderThan), now.Add(-agentsOlderThan)
	print := func(verb string, p store.Pruned) {
		if olderThan > 0 {
			fmt.Fprintf(stdout, "%s settled before %s (older than %s): %d runs, %d events, %d messages, %d answer requests, %d threads\n",
				verb, cutoff.UTC().Format(time.RFC3339), olderThan, p.Runs, p.Events, p.Messages, p.AnswerRequests, p.Threads)
		}
		if agentsOlderThan > 0 {
			fmt.Fprintf(stdout, "%s unserved since before %s (older than %s): %d agents, %d providers\n",
				verb, agentsCutoff.UTC().Format(time.RFC3339), agentsOlderThan, p.Agents, p.Providers)
		}
	}
	if *dry {
		var p store.Pruned
		if olderThan > 0 {
			if p, err = st.PrunePreview(ctx, cutoff); err != nil {
				return err
			}
		}
		if agentsOlderThan > 0 {
			// The runs pass goes first and frees the agents only its runs
			// named: counted as the pass deletes them.
			var runsCutoff time.Time
			if olderThan > 0 {
				runsCutoff = cutoff
			}
			r, err := st.PruneRecordsPreview(ctx, agentsCutoff, runsCutoff)
			if err != nil {
				return err
			}
			p.Agents, p.Providers = r.Agents, r.Providers
		}
		print("would delete", p)
		if olderThan > 0 {
			fmt.Fprintln(stdout, "(threads: those left empty, a parent thread with the last of its children)")
		}
		return nil
	}
	c := &retention.Cleaner{Store: st, Retention: olderThan, AgentRetention: agentsOlderThan, Batch: *batch, Log: log,
		Now: func(context.Context) (time.Time, error) { return now, nil }}
	p, err := c.Pass(ctx)
	if err != nil {
		if p != (store.Pruned{}) {
			print("deleted, before the error,", p)
		}
		return err
	}
	print("deleted", p)
	return nil
}
