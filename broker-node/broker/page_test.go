package broker

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
)

// The operator console reads a page of the roster every 1.5 s under the
// broker's lock (design.md §The operator console): many keys serving many
// agents give back the first keys asked for, the withdrawn first and then
// by key, each with the first of its agents by name and how many it
// serves — what Snapshot says of them, cut to the page — and how many keys
// there are.
func TestProviderPageBounded(t *testing.T) {
	h := newHarness(t, Settings{QualityTolerance: 1})
	const keys, perKey = 12, 200
	links := make([]*fakeLink, keys)
	for i := range links {
		links[i] = h.connect(byte(i+1), nil)
		names := make([]string, perKey)
		for j := range names {
			names[j] = fmt.Sprintf("agent-%03d", (j*7)%perKey) // out of order
		}
		links[i].register(names...)
	}
	// The last key by order declines with room at tolerance 1: withdrawn
	// (serving nothing from then on), it is listed first.
	last := slices.MaxFunc(links, func(a, b *fakeLink) int { return strings.Compare(a.key, b.key) })
	id, _ := h.door(last.key, "agent-000", "x")
	if got := last.offer(); got != id {
		t.Fatalf("offered %s, want %s", got, id)
	}
	last.decline(id)
	h.eventually("the key is withdrawn", func() bool {
		page, _ := h.b.ProviderPage(1, 0)
		return len(page) == 1 && page[0].Key == last.key && page[0].Withdrawn
	})
	h.settle()

	snap := h.b.Snapshot().Providers
	sort.SliceStable(snap, func(i, j int) bool { return snap[i].Withdrawn && !snap[j].Withdrawn })
	for _, c := range []struct{ limit, agents int }{{5, 10}, {1, 0}, {0, 5}, {keys, perKey}, {keys + 5, perKey + 5}} {
		page, total := h.b.ProviderPage(c.limit, c.agents)
		if total != keys || len(page) != min(c.limit, keys) {
			t.Fatalf("page(%d, %d): %d of %d keys; want %d of %d", c.limit, c.agents, len(page), total, min(c.limit, keys), keys)
		}
		for i, got := range page {
			want := snap[i]
			if got.Key != want.Key || got.Links != want.Links || got.Withdrawn != want.Withdrawn || !got.Since.Equal(want.Since) ||
				got.InFlight != want.InFlight || (got.Declared == nil) != (want.Declared == nil) ||
				got.AgentCount != want.AgentCount || want.AgentCount != len(want.Agents) ||
				want.AgentCount != map[bool]int{false: perKey, true: 0}[want.Withdrawn] ||
				!slices.Equal(got.Agents, want.Agents[:min(c.agents, len(want.Agents))]) {
				t.Fatalf("page(%d, %d)[%d] = %+v\nwant (cut to the page) %+v", c.limit, c.agents, i, got, want)
			}
		}
	}
}
