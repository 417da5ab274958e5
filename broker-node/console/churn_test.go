package console_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
)

type churnState struct {
	Providers struct {
		Source string `json:"source"`
		Total  int    `json:"total"`
		List   []struct {
			Key        string   `json:"key"`
			Agents     []string `json:"agents"`
			AgentCount int      `json:"agentCount"`
			Links      int      `json:"links"`
			Withdrawn  bool     `json:"withdrawn"`
		} `json:"list"`
	} `json:"providers"`
}

// checkPage reports what is wrong with one state's roster page: a key
// listed twice, a list longer or shorter than the total allows, the
// withdrawn not first or the rest out of key order, agents unsorted or
// miscounted.
func checkPage(s churnState) string {
	p := s.Providers
	if p.Source != "roster" {
		return "source " + p.Source
	}
	if len(p.List) != min(p.Total, providersListed) {
		return fmt.Sprintf("%d listed of %d", len(p.List), p.Total)
	}
	seen := map[string]bool{}
	for i, pv := range p.List {
		if seen[pv.Key] {
			return "listed twice: " + pv.Key
		}
		seen[pv.Key] = true
		if i > 0 {
			prev := p.List[i-1]
			if !prev.Withdrawn && pv.Withdrawn || prev.Withdrawn == pv.Withdrawn && prev.Key >= pv.Key {
				return fmt.Sprintf("out of order at %d: %s (withdrawn %v) after %s (withdrawn %v)", i, pv.Key, pv.Withdrawn, prev.Key, prev.Withdrawn)
			}
		}
		if pv.Links < 1 || pv.AgentCount != len(pv.Agents) || !sort.StringsAreSorted(pv.Agents) ||
			len(slices.Compact(slices.Clone(pv.Agents))) != len(pv.Agents) {
			return fmt.Sprintf("provider %s: %d links, %d agents %v", pv.Key, pv.Links, pv.AgentCount, pv.Agents)
		}
	}
	return ""
}

// Providers connecting, registering, leaving and being replaced at
// random, and one withdrawn, while consoles poll the leader's state
// (Broker.ProviderPage under the broker's lock): every page lists each key
// once, the withdrawn first and then by key, as many as its total allows;
// once the churn stops, the page is the roster the providers left: each
// key with the agents it registered.
func TestConsoleProviderPageUnderChurn(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	h := nodetest.Start(t, func(c *config.Broker) { withToken(c); c.ProviderQualityTolerance = 1 })

	poll := func() (churnState, error) {
		var s churnState
		req, _ := http.NewRequest("GET", h.URL+"/console/api/state", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return s, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			return s, fmt.Errorf("status %d", resp.StatusCode)
		}
		return s, json.NewDecoder(resp.Body).Decode(&s)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var once sync.Once
	halt := func() { once.Do(func() { close(stop) }); wg.Wait() }
	defer halt()
	polls := make([]int, 2)
	for i := range polls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				s, err := poll()
				if err != nil {
					t.Errorf("poll: %v", err)
					return
				}
				if bad := checkPage(s); bad != "" {
					t.Errorf("poll %d: %s", polls[i], bad)
					return
				}
				polls[i]++
			}
		}()
	}

	// The withdrawn one: declines with room at tolerance 1, holding a run
	// it never ends, so its link stays open (a withdrawn link is closed
	// once it holds none, design.md D6).
	w := h.Connect(200, nil)
	w.Register("echo")
	held, _ := h.Door(w.Key, "echo", "", "held")
	if f := w.Offer(); f.RunID != held {
		t.Fatalf("offered %s, want %s", f.RunID, held)
	}
	w.Accept(held)
	h.WaitStatus(held, "running")
	id, _ := h.Door(w.Key, "echo", "", "x")
	if f := w.Offer(); f.RunID != id {
		t.Fatalf("offered %s, want %s", f.RunID, id)
	}
	w.Decline(id)

	const seeds = 10
	provs := map[byte]*nodetest.Prov{}
	names := map[byte]map[string]bool{}
	for range 120 {
		sd := byte(1 + rng.IntN(seeds))
		p := provs[sd]
		switch op := rng.IntN(5); {
		case p == nil || op == 0: // connect, replacing any link of the key
			np := h.Connect(sd, nil)
			if p != nil {
				p.Close() // the older link, closed by its process
			}
			provs[sd], names[sd] = np, map[string]bool{}
		case op == 1:
			// A register names the link's whole set (it drops the rest).
			var ns []string
			names[sd] = map[string]bool{}
			for range 1 + rng.IntN(4) {
				n := fmt.Sprintf("agent-%02d", rng.IntN(30))
				if !slices.Contains(ns, n) {
					ns = append(ns, n)
				}
				names[sd][n] = true
			}
			p.Register(ns...)
		case op == 2:
			p.Goodbye()
			delete(provs, sd)
		case op == 3:
			p.Close()
			delete(provs, sd)
		default:
			p.Barrier()
		}
	}
	halt()
	t.Logf("polls %v", polls)
	for _, p := range provs {
		p.Barrier()
	}
	want := map[string]int{w.Key: 0}
	for sd, p := range provs {
		want[p.Key] = len(names[sd])
	}
	var last churnState
	defer func() {
		if t.Failed() {
			for _, pv := range last.Providers.List {
				t.Logf("listed %s: withdrawn %v, %d links, %d agents %v (want %d)", pv.Key[:8], pv.Withdrawn, pv.Links, pv.AgentCount, pv.Agents, want[pv.Key])
			}
			t.Logf("total %d, want %d keys", last.Providers.Total, len(want))
		}
	}()
	h.Eventually("the page is the roster the providers left", func() bool {
		s, err := poll()
		if err != nil {
			t.Fatal(err)
		}
		last = s
		got := map[string]int{}
		for _, pv := range s.Providers.List {
			got[pv.Key] = pv.AgentCount
		}
		return checkPage(s) == "" && s.Providers.Total == len(want) && fmt.Sprint(got) == fmt.Sprint(want) &&
			len(s.Providers.List) > 0 && s.Providers.List[0].Key == w.Key && s.Providers.List[0].Withdrawn
	})
}
