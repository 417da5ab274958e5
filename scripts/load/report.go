package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Target is one of issue #9's targets, judged as a ratio in this run.
type Target struct {
	Name     string  `json:"name"`
	Measured float64 `json:"measured"`
	Limit    float64 `json:"limit"`
	Unit     string  `json:"unit"`
	Holds    bool    `json:"holds"`
	Note     string  `json:"note,omitempty"`
}

func sortPhases(ps []Phase) {
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].OfferedPerS < ps[j].OfferedPerS })
}

// runStoreNote puts the completed runs/s beside the run store floor.
func runStoreNote(r *Report) string {
	if r.Floors.RunStorePerSec <= 0 {
		return ""
	}
	return fmt.Sprintf("; the run's storage path alone (run store floor) %.0f runs/s, of which the stack completes %.2f",
		r.Floors.RunStorePerSec, r.Max.RunsPerSec/r.Floors.RunStorePerSec)
}

func runStoreCell(fl Floors) string {
	if fl.RunStorePerSec <= 0 {
		return ""
	}
	return fmt.Sprintf("; run store floor %.0f runs/s (%d writers)", fl.RunStorePerSec, fl.PGTxConcurrency)
}

func targets(r *Report) []Target {
	var ts []Target
	fl := r.Floors
	if fl.PGTxPerSec > 0 {
		ratio := r.Max.RunsPerSec / fl.PGTxPerSec
		ts = append(ts, Target{Name: fmt.Sprintf("completed runs/s (%d events) ÷ insert+NOTIFY tx/s", r.Config.Events),
			Measured: ratio, Limit: 0.5, Unit: "ratio ≥", Holds: ratio >= 0.5,
			Note: fmt.Sprintf("%.1f runs/s vs %.0f tx/s", r.Max.RunsPerSec, fl.PGTxPerSec) + runStoreNote(r)})
	}
	if fl.NotifyRTTP50 > 0 && r.Half.DispatchRuns > 0 {
		// Issue #9 defines dispatch latency as door accepted → run frame;
		// the caller-send figure (which adds the HTTP request and the
		// door's own commit) stands in only when the doors are not ours.
		h := r.Half
		what, p50ms, p99ms := "door accepted → run frame", h.AcceptedP50, h.AcceptedP99
		note := fmt.Sprintf("; caller send → run frame p50 %.2f ms, p99 %.2f ms", h.DispatchP50, h.DispatchP99)
		if h.AcceptedRuns == 0 {
			what, p50ms, p99ms = "caller send → run frame, an upper bound", h.DispatchP50, h.DispatchP99
			note = "; no door-accepted times (the doors are not in this process)"
		} else if h.AcceptedMissing > 0 {
			note += fmt.Sprintf("; %d of %d runs without an accepted time", h.AcceptedMissing, h.DispatchRuns)
		}
		if h.AcceptedEarly > 0 {
			note += fmt.Sprintf("; %d runs' frame arrived before the door's CreateRun returned (counted as 0)", h.AcceptedEarly)
		}
		if fl.NoticePathP50 > 0 {
			note += fmt.Sprintf("; the path's own storage (door accepted → NOTIFY read, store calls alone, idle) p50 %.2f ms = %.1f× the NOTIFY round trip, p99 %.2f ms; the offering write goes beside the frame (door accepted → offering written p50 %.2f ms, p99 %.2f ms)",
				fl.NoticePathP50, fl.NoticePathP50/fl.NotifyRTTP50, fl.NoticePathP99, fl.OfferPathP50, fl.OfferPathP99)
		}
		if h.LoadedRTTSamples > 0 {
			note += fmt.Sprintf("; the NOTIFY round trip itself during this phase (its insert, commit and delivery; %d, one every %s) p50 %.2f ms, p99 %.2f ms: dispatch p99 %.1f× its p99",
				h.LoadedRTTSamples, loadedRTTEvery, h.LoadedRTTP50, h.LoadedRTTP99, p99ms/h.LoadedRTTP99)
		}
		p50, p99 := p50ms/fl.NotifyRTTP50, p99ms/fl.NotifyRTTP50
		ts = append(ts, Target{Name: "dispatch (" + what + ") p50 at half load ÷ NOTIFY round trip", Measured: p50, Limit: 2, Unit: "ratio ≤", Holds: p50 <= 2,
			Note: fmt.Sprintf("%.2f ms vs %.2f ms", p50ms, fl.NotifyRTTP50) + note})
		ts = append(ts, Target{Name: "dispatch (" + what + ") p99 at half load ÷ NOTIFY round trip", Measured: p99, Limit: 5, Unit: "ratio ≤", Holds: p99 <= 5,
			Note: fmt.Sprintf("%.2f ms vs %.2f ms", p99ms, fl.NotifyRTTP50) + note})
	}
	if s := r.Stream; s != nil {
		all := s.Stored == s.Events+2 && s.StoredUnique == s.Stored && s.Read == s.Events
		ts = append(ts, Target{Name: "one run's stream, provider → caller, every event persisted", Measured: s.PerSec, Limit: 20000,
			Unit: "events/s ≥", Holds: s.PerSec >= 20000 && all,
			Note: streamNote(s)})
	}
	if id := r.Idle; id != nil {
		ts = append(ts, Target{Name: fmt.Sprintf("broker memory per idle link (%d links, RSS)", id.Opened), Measured: id.RSSPerLinkKiB,
			Limit: 32, Unit: "KiB ≤", Holds: id.RSSPerLinkKiB <= 32 && id.Opened == id.Links,
			Note: fmt.Sprintf("Go heap+stacks %.1f KiB/link; idle CPU %.1f%% of a core", id.HeapPerLinkKiB, id.IdleCPUPercent)})
	}
	return ts
}

// streamNote is the stream target's detail: what was stored, and the
// stream's rate against the store floor of the same run.
func streamNote(s *Stream) string {
	n := fmt.Sprintf("%d read, %d stored (%d unique) of %d+2", s.Read, s.Stored, s.StoredUnique, s.Events)
	if s.StoreFloorPerSec > 0 {
		n += fmt.Sprintf("; %.2f of the store floor (%.0f events/s in batches of %d)", s.PerSec/s.StoreFloorPerSec, s.StoreFloorPerSec, s.StoreFloorBatch)
	}
	return n
}

func yes(b bool) string {
	if b {
		return "holds"
	}
	return "DOES NOT HOLD"
}

// table renders the report as Markdown tables.
func table(r *Report) string {
	var b strings.Builder
	fl := r.Floors
	fmt.Fprintf(&b, "Measured %s on %d CPUs (%s); %d providers, %d callers (%.0f%% A2A), %d events/run of %d B, %s per phase.\n\n",
		r.At.Format("2006-01-02 15:04 UTC"), r.CPUs, r.GoVersion, r.Config.Providers, r.Config.Callers, 100*r.Config.A2AShare,
		r.Config.Events, r.Config.EventSize, r.Config.Duration)
	b.WriteString("| figure | value | floor (same run) |\n|---|---|---|\n")
	fmt.Fprintf(&b, "| completed runs/s (max, closed loop) | %.1f (%d failed) | insert+NOTIFY %.0f tx/s (%d writers)%s |\n",
		r.Max.RunsPerSec, r.Max.Failed, fl.PGTxPerSec, fl.PGTxConcurrency, runStoreCell(fl))
	offerPath := ""
	if fl.NoticePathP50 > 0 {
		offerPath = fmt.Sprintf("; door accepted → NOTIFY read (store calls alone) p50 %.2f ms, p99 %.2f ms; → offering written p50 %.2f ms, p99 %.2f ms",
			fl.NoticePathP50, fl.NoticePathP99, fl.OfferPathP50, fl.OfferPathP99)
	}
	fmt.Fprintf(&b, "| dispatch (door accepted → run frame) p50 / p90 / p99 at max | %s | NOTIFY round trip p50 %.2f ms, p99 %.2f ms%s |\n",
		acceptedCell(r.Max), fl.NotifyRTTP50, fl.NotifyRTTP99, offerPath)
	fmt.Fprintf(&b, "| dispatch (caller send → run frame) p50 / p90 / p99 at max | %.2f / %.2f / %.2f ms | |\n",
		r.Max.DispatchP50, r.Max.DispatchP90, r.Max.DispatchP99)
	loaded := ""
	if r.Half.LoadedRTTSamples > 0 {
		loaded = fmt.Sprintf("NOTIFY round trip during this phase p50 %.2f ms, p99 %.2f ms (%d)", r.Half.LoadedRTTP50, r.Half.LoadedRTTP99, r.Half.LoadedRTTSamples)
	}
	fmt.Fprintf(&b, "| dispatch (door accepted → run frame) p50 / p90 / p99 at half load (%.1f runs/s offered) | %s | %s |\n",
		r.Half.OfferedPerS, acceptedCell(r.Half), loaded)
	fmt.Fprintf(&b, "| dispatch (caller send → run frame) p50 / p90 / p99 at half load | %.2f / %.2f / %.2f ms | |\n",
		r.Half.DispatchP50, r.Half.DispatchP90, r.Half.DispatchP99)
	fmt.Fprintf(&b, "| event latency p50 / p99 at max (provider → caller SSE) | %.2f / %.2f ms | WebSocket loopback round trip p50 %.3f ms, p99 %.3f ms |\n",
		r.Max.EventP50, r.Max.EventP99, fl.WSRTTP50, fl.WSRTTP99)
	fmt.Fprintf(&b, "| event latency p50 / p99 at half load | %.2f / %.2f ms | |\n", r.Half.EventP50, r.Half.EventP99)
	if s := r.Stream; s != nil {
		floor := ""
		if s.StoreFloorPerSec > 0 {
			floor = fmt.Sprintf("store floor %.0f events/s (store.AppendProviderEvents into a scratch run, batches of %d, one connection)", s.StoreFloorPerSec, s.StoreFloorBatch)
		}
		fmt.Fprintf(&b, "| one run's stream | %.0f events/s (%d events in %.2f s; %d stored, %d unique, in %d transactions over %.2f s; the lane in the store call %.2f s, in the live feed's publish %.2f s; the link's read waited on a full backlog %.0f times) | %s |\n",
			s.PerSec, s.Events, s.Seconds, s.Stored, s.StoredUnique, s.Batches, s.StoreSeconds, s.LaneStoreSeconds, s.LanePublishSeconds, s.BackpressureWaits, floor)
	}
	if id := r.Idle; id != nil {
		fmt.Fprintf(&b, "| idle links | %d of %d open (%d keys) in %.1f s; broker RSS %.1f KiB/link, Go heap+stacks %.1f KiB/link; idle CPU %.1f%% of a core | |\n",
			id.Opened, id.Links, id.Keys, id.OpenSeconds, id.RSSPerLinkKiB, id.HeapPerLinkKiB, id.IdleCPUPercent)
	}
	if len(r.Sweep) > 0 {
		b.WriteString("\n| offered runs/s | completed runs/s | dispatch from door accepted p50 | p99 | dispatch from caller send p50 | p90 | p99 | event p50 | p99 | failed |\n|---|---|---|---|---|---|---|---|---|---|\n")
		for _, p := range r.Sweep {
			acc50, acc99 := "—", "—"
			if p.AcceptedRuns > 0 {
				acc50, acc99 = fmt.Sprintf("%.2f ms", p.AcceptedP50), fmt.Sprintf("%.2f ms", p.AcceptedP99)
			}
			fmt.Fprintf(&b, "| %.1f (%s) | %.1f | %s | %s | %.2f ms | %.2f ms | %.2f ms | %.2f ms | %.2f ms | %d |\n",
				p.OfferedPerS, p.Name, p.RunsPerSec, acc50, acc99, p.DispatchP50, p.DispatchP90, p.DispatchP99, p.EventP50, p.EventP99, p.Failed)
		}
	}
	if g := r.Growth; g != nil {
		b.WriteString(growthTable(g))
	}
	b.WriteString("\n| target | measured | limit | verdict | detail |\n|---|---|---|---|---|\n")
	for _, t := range r.Targets {
		fmt.Fprintf(&b, "| %s | %.2f | %s %g | %s | %s |\n", t.Name, t.Measured, t.Unit, t.Limit, yes(t.Holds), t.Note)
	}
	return b.String()
}

// acceptedCell is a phase's door-accepted dispatch p50 / p90 / p99, with
// the runs that had no accepted time, if any.
func acceptedCell(p Phase) string {
	if p.AcceptedRuns == 0 {
		if p.AcceptedMissing > 0 {
			return fmt.Sprintf("— (none of %d runs had an accepted time)", p.AcceptedMissing)
		}
		return "— (the doors are not in this process)"
	}
	c := fmt.Sprintf("%.2f / %.2f / %.2f ms", p.AcceptedP50, p.AcceptedP90, p.AcceptedP99)
	if p.AcceptedMissing > 0 {
		c += fmt.Sprintf(" (%d of %d runs without an accepted time)", p.AcceptedMissing, p.DispatchRuns)
	}
	if p.AcceptedEarly > 0 {
		c += fmt.Sprintf(" (%d frames before the door's return, as 0)", p.AcceptedEarly)
	}
	return c
}

func printTable(out io.Writer, r *Report) {
	// The Markdown table reads as a table in a terminal too; align it.
	tw := tabwriter.NewWriter(out, 0, 0, 1, ' ', 0)
	for _, l := range strings.Split(table(r), "\n") {
		fmt.Fprintln(tw, strings.ReplaceAll(l, "|", "\t|"))
	}
	tw.Flush()
}

const (
	docBegin = "<!-- load:begin -->"
	docEnd   = "<!-- load:end -->"
)

// rewriteDoc replaces the text between the markers in path with the table.
func rewriteDoc(path string, r *Report) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(b)
	i, j := strings.Index(s, docBegin), strings.Index(s, docEnd)
	if i < 0 || j < i {
		return fmt.Errorf("%s: no %s … %s section", path, docBegin, docEnd)
	}
	s = s[:i+len(docBegin)] + "\n" + table(r) + "\n" + s[j:]
	return os.WriteFile(path, []byte(s), 0o644)
}

// chart draws dispatch latency against offered load — door accepted → run
// frame p50 and p99 (the targets' figure) and caller send → run frame p50
// — with the NOTIFY round trip and the targets' lines, as a standalone SVG.
// Without door-accepted times it draws the caller-send p50 and p99.
func chart(r *Report) string {
	pts := r.Sweep
	if len(pts) == 0 {
		half := r.Half
		max := r.Max
		max.OfferedPerS = r.Max.RunsPerSec
		pts = []Phase{half, max}
	}
	const W, H, L, R, T, B = 720, 420, 70, 180, 30, 50
	type line struct {
		get          func(Phase) float64
		color, label string
		dash         string
	}
	lines := []line{
		{func(p Phase) float64 { return p.AcceptedP50 }, "#16c", "p50 (door accepted)", ""},
		{func(p Phase) float64 { return p.AcceptedP99 }, "#c13", "p99 (door accepted)", ""},
		{func(p Phase) float64 { return p.DispatchP50 }, "#85b", "p50 (caller send)", "6 3"},
	}
	haveAccepted := false
	for _, p := range pts {
		haveAccepted = haveAccepted || p.AcceptedRuns > 0
	}
	if !haveAccepted {
		lines = []line{
			{func(p Phase) float64 { return p.DispatchP50 }, "#16c", "p50 (caller send)", ""},
			{func(p Phase) float64 { return p.DispatchP99 }, "#c13", "p99 (caller send)", ""},
		}
	}
	// The y axis is logarithmic, in whole decades: the targets sit a
	// fraction of a millisecond up, the tails at tens of milliseconds.
	xmax, ymin, ymax := 0.0, math.Inf(1), 0.0
	for _, p := range pts {
		xmax = maxf(xmax, p.OfferedPerS)
		for _, l := range lines {
			if v := l.get(p); v > 0 {
				ymax, ymin = maxf(ymax, v), math.Min(ymin, v)
			}
		}
	}
	if nrtt := r.Floors.NotifyRTTP50; nrtt > 0 {
		ymin, ymax = math.Min(ymin, nrtt), maxf(ymax, 5*nrtt)
	}
	if math.IsInf(ymin, 1) || ymax <= 0 {
		ymin, ymax = 0.1, 10
	}
	lo, hi := math.Floor(math.Log10(ymin)), math.Ceil(math.Log10(ymax))
	if hi <= lo {
		hi = lo + 1
	}
	xmax = nice(xmax * 1.05)
	x := func(v float64) float64 { return L + v/xmax*(W-L-R) }
	y := func(v float64) float64 {
		v = math.Max(v, math.Pow(10, lo))
		return H - B - (math.Log10(v)-lo)/(hi-lo)*(H-T-B)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", W, H, W, H)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", W, H)
	fmt.Fprintf(&b, `<text x="%d" y="18" font-size="14">Dispatch latency against load (%s)</text>`+"\n", L, r.At.Format("2006-01-02 15:04 UTC"))
	for i := 0; i <= 5; i++ {
		xv := xmax * float64(i) / 5
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eee"/><text x="%.1f" y="%d" text-anchor="middle">%.0f</text>`+"\n",
			x(xv), T, x(xv), H-B, x(xv), H-B+16, xv)
	}
	for d := lo; d <= hi; d++ {
		yv := math.Pow(10, d)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#eee"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n",
			L, y(yv), W-R, y(yv), L-6, y(yv)+4, strconv.FormatFloat(yv, 'f', -1, 64))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">offered load (runs/s)</text>`+"\n", (L+W-R)/2, H-12)
	fmt.Fprintf(&b, `<text x="16" y="%d" transform="rotate(-90 16 %d)" text-anchor="middle">dispatch latency (ms, log scale)</text>`+"\n", (T+H-B)/2, (T+H-B)/2)
	hline := func(v float64, color, label string) {
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s" stroke-dasharray="4 3"/><text x="%d" y="%.1f" fill="%s">%s</text>`+"\n",
			L, y(v), W-R, y(v), color, W-R+6, y(v)+4, color, label)
	}
	nrtt := r.Floors.NotifyRTTP50
	hline(nrtt, "#888", fmt.Sprintf("NOTIFY RTT %.2f ms", nrtt))
	hline(2*nrtt, "#2a7", "p50 target (2×)")
	hline(5*nrtt, "#c70", "p99 target (5×)")
	series := func(get func(Phase) float64, color, label, dash string, row int) {
		if dash != "" {
			dash = ` stroke-dasharray="` + dash + `"`
		}
		var path strings.Builder
		for i, p := range pts {
			cmd := "L"
			if i == 0 {
				cmd = "M"
			}
			fmt.Fprintf(&path, "%s%.1f %.1f ", cmd, x(p.OfferedPerS), y(get(p)))
		}
		fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="2"%s/>`+"\n", path.String(), color, dash)
		for _, p := range pts {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", x(p.OfferedPerS), y(get(p)), color)
		}
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/><text x="%d" y="%d">%s</text>`+"\n",
			W-R+6, T+10+row*18, W-R+26, T+10+row*18, color, dash, W-R+30, T+14+row*18, label)
	}
	for i, l := range lines {
		series(l.get, l.color, l.label, l.dash, i)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func maxf(a, b float64) float64 {
	if a > b {
		return a
	}
	return b
}

// nice rounds v up to 1, 2 or 5 times a power of ten.
func nice(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := 1.0
	for p*10 <= v {
		p *= 10
	}
	for p > v {
		p /= 10
	}
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}
