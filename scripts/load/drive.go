package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/provider"
)

// hist collects durations.
type hist struct {
	mu sync.Mutex
	d  []time.Duration
}

func (h *hist) add(d time.Duration) {
	h.mu.Lock()
	h.d = append(h.d, d)
	h.mu.Unlock()
}

func (h *hist) n() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.d)
}

// ms is the q-quantile in milliseconds (0 when empty).
func (h *hist) ms(q float64) float64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), h.d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(q * float64(len(s)-1))
	return float64(s[i]) / float64(time.Millisecond)
}

// probe is where the providers and callers of one phase record.
type probe struct {
	dispatch *hist // caller sent → run frame at the provider
	accepted *hist // door accepted (its CreateRun committed) → run frame at the provider
	event    *hist // provider emitted → caller read it
	// acceptedMissing counts the runs of dispatch with no accepted time
	// (the door's store never logged the run as queued, e.g. a retried
	// request); acceptedEarly the runs whose frame arrived before the
	// door's CreateRun returned, counted as 0 in accepted.
	acceptedMissing atomic.Int64
	acceptedEarly   atomic.Int64
	// counts makes a run's dispatch sample and its accepted sample (or
	// its count as missing) one step, so a phase read while frames still
	// arrive sees every run in both or in neither.
	counts sync.Mutex
	done   atomic.Int64
	failed atomic.Int64
}

func newProbe() *probe { return &probe{dispatch: &hist{}, accepted: &hist{}, event: &hist{}} }

// fleet is the load's providers.
type fleet struct {
	keys    []string
	clients []*provider.Client
	probe   atomic.Pointer[probe]
	acc     *accepted // the doors' accepted times; nil when the doors are not in this process
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	events  int
	pad     string
	stream  chan streamStart
}

type streamStart struct {
	n     int
	first chan time.Time
}

func newSigner() *identity.Signer {
	seed := make([]byte, 32)
	_, _ = rand.Read(seed)
	s, err := identity.NewSignerFromSeed(seed)
	if err != nil {
		panic(err)
	}
	return s
}

// startFleet connects n SDK providers serving "load" (and "stream").
func startFleet(ctx context.Context, brokerURL string, acc *accepted, n, events, size int) (*fleet, error) {
	f := &fleet{events: events, pad: strings.Repeat("x", size), stream: make(chan streamStart, 1), acc: acc}
	f.probe.Store(newProbe())
	ctx, f.cancel = context.WithCancel(ctx)
	hc := &http.Client{Timeout: 10 * time.Second}
	for range n {
		s := newSigner()
		c, err := provider.New(provider.Config{BaseURL: brokerURL, Signer: s, HTTPClient: hc,
			Logger: slog.New(slog.DiscardHandler),
			Agents: []provider.Agent{{Name: "load", Handler: f.handle}, {Name: "stream", Handler: f.handleStream}}})
		if err != nil {
			f.stop()
			return nil, err
		}
		f.keys = append(f.keys, s.PublicKeyHex())
		f.clients = append(f.clients, c)
		f.wg.Add(1)
		go func() { defer f.wg.Done(); _ = c.Run(ctx) }()
	}
	for _, c := range f.clients {
		select {
		case <-c.Ready():
		case <-time.After(30 * time.Second):
			f.stop()
			return nil, errors.New("a provider never registered")
		}
	}
	return f, nil
}

func (f *fleet) stop() {
	if f.cancel != nil {
		f.cancel()
	}
	f.wg.Wait()
}

// sentAt reads the caller's send time carried in the user text ("t0=<ns>").
func sentAt(text string) (time.Time, bool) {
	_, v, ok := strings.Cut(text, "t0=")
	if !ok {
		return time.Time{}, false
	}
	v, _, _ = strings.Cut(v, " ")
	ns, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(0, ns), true
}

func (f *fleet) handle(ctx context.Context, r *provider.Run) error {
	// The frame's arrival is the handler's start, before the tool reads
	// the caller's send time out of the input.
	now := time.Now()
	if t0, ok := sentAt(r.LastUserText()); ok {
		p := f.probe.Load()
		p.counts.Lock()
		p.dispatch.add(now.Sub(t0))
		if f.acc != nil {
			if at, ok := f.acc.arrive(r.ID, now, p); ok {
				p.accepted.add(now.Sub(at))
			} else {
				p.acceptedMissing.Add(1)
			}
		}
		p.counts.Unlock()
	}
	if err := r.Emit(ctx, map[string]any{"type": "RUN_STARTED", "threadId": r.ThreadID, "runId": r.ID}); err != nil {
		return err
	}
	for range f.events - 2 {
		ev := fmt.Sprintf(`{"type":"CUSTOM","name":"load","value":{"t":%d,"pad":%q}}`, time.Now().UnixNano(), f.pad)
		if err := r.Emit(ctx, json.RawMessage(ev)); err != nil {
			return err
		}
	}
	return r.Emit(ctx, map[string]any{"type": "RUN_FINISHED", "threadId": r.ThreadID, "runId": r.ID})
}

// handleStream emits as many small events as the user text asks ("n=<k>").
func (f *fleet) handleStream(ctx context.Context, r *provider.Run) error {
	_, v, _ := strings.Cut(r.LastUserText(), "n=")
	n, _ := strconv.Atoi(v)
	if err := r.Emit(ctx, map[string]any{"type": "RUN_STARTED", "threadId": r.ThreadID, "runId": r.ID}); err != nil {
		return err
	}
	select {
	case s := <-f.stream:
		s.first <- time.Now()
	default:
	}
	for i := range n {
		ev := `{"type":"CUSTOM","name":"s","value":` + strconv.Itoa(i) + `}`
		if err := r.Emit(ctx, json.RawMessage(ev)); err != nil {
			return err
		}
	}
	return r.Emit(ctx, map[string]any{"type": "RUN_FINISHED", "threadId": r.ThreadID, "runId": r.ID})
}

// caller runs one run through a door and reports how it ended.
type caller struct {
	hc    *http.Client
	doors string
	a2a   bool
	seq   atomic.Int64
}

var errRunFailed = errors.New("run did not complete")

// aguiRun posts one run to the AG-UI door and reads its SSE to the end. It
// returns the run id and the events read.
func (c *caller) aguiRun(ctx context.Context, key, agent, text string, onEvent func(typ string, raw []byte)) (string, int, error) {
	id := fmt.Sprintf("lr-%d-%d", time.Now().UnixNano(), c.seq.Add(1))
	body, _ := json.Marshal(map[string]any{"threadId": "new", "runId": id,
		"messages": []any{map[string]any{"id": "m-" + id, "role": "user", "content": text}},
		"tools":    []any{}, "context": []any{}, "state": nil, "forwardedProps": map[string]any{}})
	req, err := http.NewRequestWithContext(ctx, "POST", c.doors+"/agui/"+key+"/"+agent, bytes.NewReader(body))
	if err != nil {
		return "", 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.hc.Do(req)
	if err != nil {
		return "", 0, err
	}
	defer done(resp.Body)
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return "", 0, fmt.Errorf("agui door: %s: %s", resp.Status, b)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var runID string
	n := 0
	for sc.Scan() {
		line := sc.Bytes()
		data, ok := bytes.CutPrefix(line, []byte("data: "))
		if !ok {
			data, ok = bytes.CutPrefix(line, []byte("data:"))
		}
		if !ok {
			continue
		}
		var ev struct {
			Type  string `json:"type"`
			RunID string `json:"runId"`
		}
		if json.Unmarshal(data, &ev) != nil {
			continue
		}
		n++
		if ev.Type == "RUN_STARTED" && runID == "" {
			runID = ev.RunID
		}
		if onEvent != nil {
			onEvent(ev.Type, data)
		}
		switch ev.Type {
		case "RUN_FINISHED":
			return runID, n, nil
		case "RUN_ERROR":
			return runID, n, fmt.Errorf("%w: %s", errRunFailed, data)
		}
	}
	if err := sc.Err(); err != nil {
		return runID, n, err
	}
	return runID, n, fmt.Errorf("%w: stream ended early", errRunFailed)
}

// done reads what is left of an answer (the SSE stream's last chunk after
// its terminal event, the newline after a JSON body) and closes it: an
// answer read to its end lets net/http reuse the connection, as a
// browser's fetch or the AG-UI and A2A clients do; one closed early costs
// the door a new TCP connection per run, which no real caller pays.
func done(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 64<<10))
	body.Close()
}

// a2aRun sends one blocking message/send through the A2A door.
func (c *caller) a2aRun(ctx context.Context, key, text string) error {
	id := fmt.Sprintf("lm-%d-%d", time.Now().UnixNano(), c.seq.Add(1))
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "message/send",
		"params": map[string]any{"message": map[string]any{"kind": "message", "role": "user", "messageId": id,
			"parts": []any{map[string]any{"kind": "text", "text": text}}}}})
	req, err := http.NewRequestWithContext(ctx, "POST", c.doors+"/a2a/"+key+"/load", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer done(resp.Body)
	var out struct {
		Result struct {
			Status struct {
				State string `json:"state"`
			} `json:"status"`
		} `json:"result"`
		Error json.RawMessage `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return fmt.Errorf("a2a door: %s: %w", resp.Status, err)
	}
	if out.Result.Status.State != "completed" {
		return fmt.Errorf("%w: a2a state %q %s", errRunFailed, out.Result.Status.State, out.Error)
	}
	return nil
}

// one runs one load run for caller i, recording into p.
func (f *fleet) one(ctx context.Context, c *caller, i int, p *probe) {
	key := f.keys[i%len(f.keys)]
	text := "t0=" + strconv.FormatInt(time.Now().UnixNano(), 10)
	var err error
	if c.a2a {
		err = c.a2aRun(ctx, key, text)
	} else {
		_, _, err = c.aguiRun(ctx, key, "load", text, func(typ string, raw []byte) {
			if typ != "CUSTOM" {
				return
			}
			var ev struct {
				Value struct {
					T int64 `json:"t"`
				} `json:"value"`
			}
			if json.Unmarshal(raw, &ev) == nil && ev.Value.T > 0 {
				p.event.add(time.Since(time.Unix(0, ev.Value.T)))
			}
		})
	}
	if err != nil {
		if ctx.Err() == nil {
			p.failed.Add(1)
		}
		return
	}
	p.done.Add(1)
}

func (c Config) callers(doors string) []*caller {
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512, MaxConnsPerHost: 0}, Timeout: 60 * time.Second}
	out := make([]*caller, c.Callers)
	na2a := int(float64(c.Callers)*c.A2AShare + 0.5)
	for i := range out {
		out[i] = &caller{hc: hc, doors: doors, a2a: i < na2a}
	}
	return out
}

// callersOf is c.Callers callers of one door (A2A when a2a).
func (c Config) callersOf(doors string, a2a bool) []*caller {
	out := c.callers(doors)
	for _, cl := range out {
		cl.a2a = a2a
	}
	return out
}

// closedLoop runs every caller back to back for d.
func (f *fleet) closedLoop(ctx context.Context, callers []*caller, d time.Duration) (*probe, time.Duration) {
	p := newProbe()
	f.probe.Store(p)
	f.acc.prune(time.Minute)
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for i, c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := i; ctx.Err() == nil; n += len(callers) {
				f.one(ctx, c, n, p)
			}
		}()
	}
	wg.Wait()
	return p, time.Since(start)
}

// openLoop offers runs at rate per second for d, however long each takes
// (at most limit in flight; over that a tick is counted as skipped).
func (f *fleet) openLoop(ctx context.Context, callers []*caller, rate float64, d time.Duration, limit int) (*probe, time.Duration, int) {
	p := newProbe()
	f.probe.Store(p)
	f.acc.prune(time.Minute)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	slots := make(chan struct{}, limit)
	var wg sync.WaitGroup
	skipped := 0
	for n := 0; ; n++ {
		at := start.Add(time.Duration(n) * interval)
		if at.Sub(start) >= d || ctx.Err() != nil {
			break
		}
		if w := time.Until(at); w > 0 {
			time.Sleep(w)
		}
		select {
		case slots <- struct{}{}:
		default:
			skipped++
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			f.one(runCtx, callers[n%len(callers)], n, p)
		}()
	}
	offered := time.Since(start)
	// Let the runs in flight finish (bounded).
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		cancel()
		<-done
	}
	return p, offered, skipped
}
