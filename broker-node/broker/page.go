package broker

import (
	"sort"
)

// ProviderPage is the operator console's view of the roster: the first
// limit provider keys with an open link, the withdrawn first and then by
// key, each with the first agents of its names (sorted; AgentCount counts
// them all), and how many keys there are. The console reads it every
// 1.5 s on the leader, under the broker's lock, which every offer, claim
// and register waits on: where Snapshot sorts every served agent and
// lists every provider's names (up to the whole roster, design.md §The
// operator console), this reads each open link once and gathers and sorts
// no more than it returns.
func (b *Broker) ProviderPage(limit, agents int) (page []ProviderView, total int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	byKey := make(map[string]*ProviderView, len(b.links))
	for _, ls := range b.links {
		pv := byKey[ls.key]
		if pv == nil {
			pv = &ProviderView{Key: ls.key, Since: ls.opened, Withdrawn: true}
			byKey[ls.key] = pv
		}
		pv.Links++
		pv.Withdrawn = pv.Withdrawn && ls.withdrawn
		if ls.opened.Before(pv.Since) {
			pv.Since = ls.opened
		}
	}
	// The first limit of them, kept sorted: each key is compared with the
	// last kept one and inserted only when it comes before it.
	before := func(x, y *ProviderView) bool {
		if x.Withdrawn != y.Withdrawn {
			return x.Withdrawn
		}
		return x.Key < y.Key
	}
	kept := make([]*ProviderView, 0, min(limit, len(byKey)))
	for _, pv := range byKey {
		kept = keepFirst(kept, pv, limit, before)
	}
	listed := make(map[string]*ProviderView, len(kept))
	for _, pv := range kept {
		listed[pv.Key] = pv
		if bk := b.buckets[pv.Key]; bk != nil {
			pv.InFlight = bk.inFlight
			if bk.declared != nil {
				d := *bk.declared
				pv.Declared = &d
			}
		}
	}
	for _, ls := range b.links {
		pv := listed[ls.key]
		if pv == nil {
			continue
		}
		for n := range ls.names {
			if b.served[AgentRef{ls.key, n}] == ls {
				pv.AgentCount++
				pv.Agents = keepFirst(pv.Agents, n, agents, func(x, y string) bool { return x < y })
			}
		}
	}
	page = make([]ProviderView, len(kept))
	for i, pv := range kept {
		page[i] = *pv
	}
	return page, len(byKey)
}

// keepFirst inserts x into kept, which holds the first (by before) of what
// it was given, sorted, and keeps at most n.
func keepFirst[T any](kept []T, x T, n int, before func(a, b T) bool) []T {
	if n <= 0 || (len(kept) == n && !before(x, kept[n-1])) {
		return kept
	}
	i := sort.Search(len(kept), func(i int) bool { return before(x, kept[i]) })
	if len(kept) == n {
		kept = kept[:n-1]
	}
	var zero T
	kept = append(kept, zero)
	copy(kept[i+1:], kept[i:])
	kept[i] = x
	return kept
}
