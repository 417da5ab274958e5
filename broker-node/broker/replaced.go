package broker

import (
	"context"
	"slices"
)

// Replaced links (design.md §Two processes of one key). A link left serving
// nothing by a newer link's register of its key is told so
// (wire.ReplacedMessage) and left open: it is offered nothing more, the runs
// it holds finish and report over it, and its queries are answered. It was
// closed, and the reference SDK, which reconnects after any closed link and
// registers its whole roster, took the agent back on its next link: two
// such processes replaced each other once a second, a ticket each time, for
// as long as both ran. The reference core leaves a replaced connection
// attached and idle too. Our SDK stops on the message (provider.ErrReplaced)
// once it holds nothing, closing the link itself.
//
// funduq closes a replaced link only when
//   - a link of its key closes leaving a name the replaced link declared
//     served by no link, or deletes its last served agent and some name the
//     replaced link declared is served by no link (ReasonReplacementGone):
//     its process, reconnecting, takes the agent back, where an open
//     replaced link would leave it unserved for as long as the process
//     runs. A name dropped or deleted by a link still serving others is
//     that link's process's choice: the replaced link stays idle, since
//     registering its whole roster again it would take those others too;
//     or
//   - its key has more than MaxLinksPerKey links open (ReasonTooManyLinks),
//     the oldest replaced first, so a stranger's key cannot pile up idle
//     links, one per ticket, outside the bound on links not yet registered
//     (a replaced link registered: it is not pending).
//
// A replaced link that registers again serves again, replacing the link
// that replaced it, by the same rule.

// MaxLinksPerKey bounds the links of one key that funduq keeps open while
// some of them are replaced: past it, the oldest replaced ones are closed.
const MaxLinksPerKey = 8

// The reasons funduq closes a replaced link with.
const (
	// A close frame's reason holds at most 123 bytes (RFC 6455 §5.5).
	ReasonReplacementGone = "the link that replaced this one is gone, its agent served by no link; reconnect and register"
	ReasonTooManyLinks    = "replaced, and this key has more than 8 links open: the oldest replaced ones are closed"
)

// addKeyLinkLocked records ls among its key's open links. Caller holds b.mu.
func (b *Broker) addKeyLinkLocked(ls *linkState) {
	m := b.keyLinks[ls.key]
	if m == nil {
		m = map[*linkState]struct{}{}
		b.keyLinks[ls.key] = m
	}
	m[ls] = struct{}{}
}

// dropKeyLinkLocked forgets ls among its key's open links. Caller holds
// b.mu.
func (b *Broker) dropKeyLinkLocked(ls *linkState) {
	m := b.keyLinks[ls.key]
	delete(m, ls)
	if len(m) == 0 {
		delete(b.keyLinks, ls.key)
	}
}

// unservedReplacedLocked returns the open replaced links of key that
// declared one of names (nil: any name), when that name is served by no
// link now. Caller holds b.mu.
func (b *Broker) unservedReplacedLocked(key string, names []string) []*linkState {
	var out []*linkState
	for ls := range b.keyLinks[key] {
		if !ls.replaced {
			continue
		}
		check := names
		if names == nil {
			check = sortedNames(ls.names)
		}
		for _, n := range check {
			if ls.names[n] && b.served[AgentRef{key, n}] == nil {
				out = append(out, ls)
				break
			}
		}
	}
	return out
}

// overKeyBoundLocked returns the oldest replaced links of key beyond
// MaxLinksPerKey open links. Caller holds b.mu.
func (b *Broker) overKeyBoundLocked(key string) []*linkState {
	links := b.keyLinks[key]
	over := len(links) - MaxLinksPerKey
	if over <= 0 {
		return nil
	}
	var replaced []*linkState
	for ls := range links {
		if ls.replaced {
			replaced = append(replaced, ls)
		}
	}
	slices.SortFunc(replaced, func(a, c *linkState) int { return cmpID(a.id, c.id) })
	return replaced[:min(over, len(replaced))]
}

func cmpID(a, c uint64) int {
	switch {
	case a < c:
		return -1
	case a > c:
		return 1
	}
	return 0
}

// closeReplaced closes each replaced link with reason. The close drains:
// the reports its provider wrote before the close reached it are still
// read and taken (D5: a report from any link of the key takes its run
// along), and the runs it holds pass to the link serving their agent, or
// wait the link grace for its key (hold.go onGone). Called without b.mu.
func (b *Broker) closeReplaced(links []*linkState, reason string) {
	for _, ls := range links {
		if d, ok := ls.link.(interface{ CloseDraining(reason string) }); ok {
			d.CloseDraining(reason)
		} else {
			ls.link.Close(reason)
		}
		b.log.Info("replaced provider link closed", "provider_key", ls.key, "link", ls.id, "reason", reason)
	}
}

// onReplaced is the link this run's offer is out to being replaced. It is
// offered nothing more, so the offer is handed back at once, uncounted, and
// the run offered again to the link now serving its agent: left out, it
// waited its deliver_timeout on a link whose process may have died unseen
// (a process's next link replaces its own lost one). The replaced link's
// process may still have accepted it: its ack, read later, claims the run
// as any report of the key serving the agent does (D15). Meanwhile the run
// keeps its place on the key (keepPlace) for what is left of the offer's
// deliver_timeout, and its next offer takes it over: given back, another
// run of the key took it first and the process, running this one, declined
// that one with no room — counted misdeclared. A link that registered
// again meanwhile serves again, and its offer stands.
func (l *lane) onReplaced(ctx context.Context, c replacedCmd) {
	if l.offer == nil || l.offer.link != c.link {
		return
	}
	b := l.b
	b.mu.Lock()
	still := c.link.replaced && b.links[c.link.link] == c.link
	b.mu.Unlock()
	if !still {
		return // registered again, or gone: its goneCmd hands the offer back
	}
	l.handBackKeeping(ctx, l.offer.due.Sub(b.clock.Now()))
	l.log.InfoContext(ctx, "offer out to a replaced link handed back; offered again", append(l.keyAttr(c.link.key), "link", c.link.id)...)
	// Offered again from the queue, not here: the reports that waited
	// behind the offer are read first (lane.handle), as a lost link's end
	// has them read — reports read before their link registered answer no
	// later offer to it (design.md D7), which they would, read after one.
	b.mu.Lock()
	b.nudgeLocked(l)
	b.mu.Unlock()
}
