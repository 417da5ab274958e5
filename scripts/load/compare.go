package main

// Two builds in one sitting (-compare BEFORE,AFTER -rounds N): the growth
// section of each build in turn, N rounds alternating, so the machine's
// drift between minutes touches every build alike; then each door's CPU per
// run (doors + broker + PostgreSQL) round by round, the means, and each
// build's ratio of the means to the first build's. Issue 20 asks for
// before and after measured in one sitting: this is that sitting as one
// command instead of a loop typed by hand.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
)

// Sitting is one -compare run: Rounds[r][b] is build b's growth section in
// round r.
type Sitting struct {
	Builds []string    `json:"builds"`
	Rounds [][]*Growth `json:"rounds"`
}

// runSitting measures the builds in dirs, rounds times over, alternating.
func runSitting(ctx context.Context, c Config, dirs []string, rounds int, out io.Writer) (*Sitting, error) {
	s := &Sitting{Builds: dirs}
	for r := 1; r <= rounds; r++ {
		row := make([]*Growth, len(dirs))
		for b, dir := range dirs {
			cc := c
			cc.BinDir, cc.JSONPath, cc.SVGPath, cc.DocPath = dir, "", "", ""
			rep, err := Run(ctx, cc, io.Discard)
			if err != nil {
				return nil, fmt.Errorf("round %d, %s: %w", r, dir, err)
			}
			if rep.Growth == nil || len(rep.Growth.Doors) == 0 {
				return nil, fmt.Errorf("round %d, %s: no growth figures", r, dir)
			}
			row[b] = rep.Growth
			var cells []string
			for i, d := range rep.Growth.Doors {
				cells = append(cells, fmt.Sprintf("%s %.2f ms/run (%.2f tx/run, %d failed)",
					doorLabel(rep.Growth, i), cpuPerRun(d), d.TxPerRun, d.Failed))
			}
			fmt.Fprintf(out, "round %d, %s: %s\n", r, dir, strings.Join(cells, "; "))
		}
		s.Rounds = append(s.Rounds, row)
	}
	fmt.Fprint(out, sittingTable(s))
	if c.JSONPath != "" {
		b, _ := json.MarshalIndent(s, "", "  ")
		if err := os.WriteFile(c.JSONPath, append(b, '\n'), 0o644); err != nil {
			return s, err
		}
	}
	return s, nil
}

// cpuPerRun is what issue 20 halves: the doors', the broker's and
// PostgreSQL's CPU per completed run.
func cpuPerRun(d DoorFigures) float64 { return d.DoorsCPUPerRun + d.BrokerCPUPerRun + d.PGCPUPerRun }

// doorLabel names the i-th door phase of g: the door, and whether it ran
// after the seeded history.
func doorLabel(g *Growth, i int) string {
	if g.PreseedRuns > 0 && i >= len(g.Doors)/2 {
		return g.Doors[i].Door + " after history"
	}
	return g.Doors[i].Door
}

// sittingTable renders a sitting: per door phase and build, CPU per run in
// each round and its mean, then each build's ratio to the first build.
func sittingTable(s *Sitting) string {
	var b strings.Builder
	if len(s.Rounds) == 0 || len(s.Builds) == 0 {
		return "no rounds measured\n"
	}
	first := s.Rounds[0][0]
	head := "| door | build |"
	for r := range s.Rounds {
		head += fmt.Sprintf(" round %d |", r+1)
	}
	head += " mean | tx/run, mean | ratio of the means to " + s.Builds[0] + " | round by round |\n"
	fmt.Fprintf(&b, "\nCPU ms per run, doors + broker + PostgreSQL:\n\n%s%s|\n", head, strings.Repeat("|---", strings.Count(head, "|")-1))
	for i := range first.Doors {
		var base []float64
		for bi, build := range s.Builds {
			var vals []float64
			tx := 0.0
			for _, row := range s.Rounds {
				d := row[bi].Doors[i]
				vals = append(vals, cpuPerRun(d))
				tx += d.TxPerRun
			}
			if bi == 0 {
				base = vals
			}
			fmt.Fprintf(&b, "| %s | %s |", doorLabel(first, i), build)
			for _, v := range vals {
				fmt.Fprintf(&b, " %.2f |", v)
			}
			fmt.Fprintf(&b, " **%.2f** | %.2f |", mean(vals), tx/float64(len(vals)))
			if bi == 0 {
				b.WriteString(" 1 | |\n")
				continue
			}
			lo, hi := 0.0, 0.0
			for r, v := range vals {
				q := v / base[r]
				if r == 0 || q < lo {
					lo = q
				}
				if r == 0 || q > hi {
					hi = q
				}
			}
			fmt.Fprintf(&b, " **%.2f** | %.2f–%.2f |\n", mean(vals)/mean(base), lo, hi)
		}
	}
	return b.String()
}

func mean(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	t := 0.0
	for _, v := range vs {
		t += v
	}
	return t / float64(len(vs))
}
