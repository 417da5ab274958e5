package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/provider"
)

// Idle is the idle-link figures.
type Idle struct {
	Links          int     `json:"links"`
	Keys           int     `json:"keys"`
	Opened         int     `json:"opened"`
	OpenSeconds    float64 `json:"open_seconds"`
	RSSPerLinkKiB  float64 `json:"rss_per_link_kib"`
	HeapPerLinkKiB float64 `json:"go_heap_stack_per_link_kib"`
	IdleCPUPercent float64 `json:"idle_cpu_percent_of_one_core"`
	IdleWindowSec  float64 `json:"idle_window_s"`
}

// memOf reads a process's RSS (/proc) and, through the node's pprof, its Go
// heap+stack in use after a GC.
func memOf(pid int, pprofAddr string) (rss, goMem float64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.Fields(v)[0], 64)
			rss = kb * 1024
		}
	}
	if pprofAddr == "" {
		return rss, 0, nil
	}
	resp, err := http.Get("http://" + pprofAddr + "/debug/pprof/heap?gc=1&debug=1")
	if err != nil {
		return rss, 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		l := sc.Text()
		for _, k := range []string{"# HeapInuse = ", "# Stack = "} {
			if v, ok := strings.CutPrefix(l, k); ok {
				f, _ := strconv.ParseFloat(strings.Fields(v)[0], 64)
				goMem += f
			}
		}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return rss, goMem, nil
}

// cpuOf is a process's user+system CPU time so far.
func cpuOf(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	// Fields after the command (which may hold spaces) start at ") ".
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const hz = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / hz, nil
}

// idleLinks opens n SDK provider links (over keys keys) to the broker node,
// measures its memory per link and its CPU while they idle, and closes them.
func idleLinks(ctx context.Context, st *stack, n, keys int, window time.Duration, profileDir string, logf func(string, ...any)) (Idle, error) {
	raiseNoFile()
	if keys <= 0 || keys > n {
		keys = n
	}
	out := Idle{Links: n, Keys: keys, IdleWindowSec: window.Seconds()}
	if st.brokerPID == 0 {
		return out, fmt.Errorf("idle links need the tool's own broker node (its memory is read from /proc)")
	}
	rss0, go0, err := memOf(st.brokerPID, st.pprofAddr)
	if err != nil {
		return out, err
	}
	signers := make([]*identity.Signer, keys)
	for i := range signers {
		signers[i] = newSigner()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	start := time.Now()
	slots := make(chan struct{}, 64) // links being opened at once
	ready := make(chan bool, n)
	for i := range n {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return out, ctx.Err()
		}
		c, err := provider.New(provider.Config{BaseURL: st.brokerURL, Signer: signers[i%keys], HTTPClient: hc,
			Logger: slog.New(slog.DiscardHandler), Agents: []provider.Agent{{Name: fmt.Sprintf("idle-%d", i),
				Handler: func(context.Context, *provider.Run) error { return nil }}}})
		if err != nil {
			return out, err
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = c.Run(ctx) }()
		go func() {
			defer func() { <-slots }()
			select {
			case <-c.Ready():
				ready <- true
			case <-time.After(60 * time.Second):
				ready <- false
			case <-ctx.Done():
				ready <- false
			}
		}()
		if i > 0 && i%2000 == 0 {
			logf("idle links: %d opening or open", i)
		}
	}
	for range n {
		if <-ready {
			out.Opened++
		}
	}
	out.OpenSeconds = time.Since(start).Seconds()
	logf("idle links: %d of %d registered in %.1fs", out.Opened, n, out.OpenSeconds)
	time.Sleep(2 * time.Second) // let registration writes and GC settle
	c0, err := cpuOf(st.brokerPID)
	if err != nil {
		return out, err
	}
	t0 := time.Now()
	select {
	case <-time.After(window):
	case <-ctx.Done():
		return out, ctx.Err()
	}
	c1, _ := cpuOf(st.brokerPID)
	out.IdleCPUPercent = 100 * float64(c1-c0) / float64(time.Since(t0))
	rss1, go1, err := memOf(st.brokerPID, st.pprofAddr)
	if err != nil {
		return out, err
	}
	if profileDir != "" && st.pprofAddr != "" { // what the links hold
		if resp, err := http.Get("http://" + st.pprofAddr + "/debug/pprof/heap"); err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			_ = os.WriteFile(filepath.Join(profileDir, "broker-node-idle-heap.pprof"), b, 0o644)
		}
	}
	if out.Opened > 0 {
		out.RSSPerLinkKiB = (rss1 - rss0) / float64(out.Opened) / 1024
		out.HeapPerLinkKiB = (go1 - go0) / float64(out.Opened) / 1024
	}
	return out, nil
}
