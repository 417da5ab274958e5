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

const pruneUsage = `usage: broker-node prune --older-than DURATION (at least 1h, e.g. 720h) [--dry-run] [--batch 1-10000]

--older-than  delete settled runs (completed, failed, cancelled) that settled longer ago than this
--dry-run     print what would be deleted and delete nothing
--batch       runs per transaction (default 500)
`

// pruneCmd is `broker-node prune --older-than D [--dry-run] [--batch N]`:
// the operator's run of what FUNDUQ_RETENTION has the leader do.
func pruneCmd(ctx context.Context, args []string, environ map[string]string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("prune", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // its errors are printed below, once, with the usage
	var olderThan time.Duration
	fs.Var((*durationFlag)(&olderThan), "older-than", "delete settled runs that settled longer ago than this (e.g. 720h); at least 1h")
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
	case !set["older-than"]:
		return refuse("--older-than is required")
	case olderThan < time.Hour:
		return refuse("--older-than %s is under 1h", olderThan)
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
	cutoff := time.Now().Add(-olderThan)
	print := func(verb string, p store.Pruned) {
		fmt.Fprintf(stdout, "%s settled before %s (older than %s): %d runs, %d events, %d messages, %d answer requests, %d threads\n",
			verb, cutoff.UTC().Format(time.RFC3339), olderThan, p.Runs, p.Events, p.Messages, p.AnswerRequests, p.Threads)
	}
	if *dry {
		p, err := st.PrunePreview(ctx, cutoff)
		if err != nil {
			return err
		}
		print("would delete", p)
		fmt.Fprintln(stdout, "(threads: those left empty; a parent thread is counted once its children are gone, on a later pass)")
		return nil
	}
	c := &retention.Cleaner{Store: st, Retention: olderThan, Batch: *batch, Log: log, Now: func() time.Time { return cutoff.Add(olderThan) }}
	p, err := c.Pass(ctx)
	if err != nil {
		if p.Runs > 0 {
			print("deleted, before the error,", p)
		}
		return err
	}
	print("deleted", p)
	return nil
}
