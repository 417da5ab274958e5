package provider

import (
	"github.com/funduq/funduq-go/core/wire"
)

// Agents taken by another process of the same key (design.md §Two processes
// of one key). funduq tells a link, name by name, which of its agents a
// newer link of its key registered and serves now (wire.TakenMessage) while
// this link goes on serving the rest. The client leaves those names out of
// every register it sends from then on, so a dropped link's reconnect does
// not take them back and leave the newer process serving nothing (told
// replaced, it would stop for good). It takes a name back when funduq says
// no link of the key serves it any more (wire.FreedMessage: the newer
// process closed its link, dropped the name or deleted it): it registers
// its roster again on the link it has, that name included. A new Run starts
// with the whole roster, as a restarted process does.

// registerFrameLocked is the register the client sends now: its roster
// less the names taken from it, and how many agents that is. Should every
// name be taken (funduq tells a link left serving nothing that it was
// replaced instead, so this is not expected), it is the whole roster: a
// register names at least one agent. c.mu must be held.
func (c *Client) registerFrameLocked() ([]byte, int) {
	if len(c.taken) == 0 {
		return c.registerMsg, len(c.regs)
	}
	regs := make([]wire.Registration, 0, len(c.regs))
	for _, r := range c.regs {
		if !c.taken[r.Name] {
			regs = append(regs, r)
		}
	}
	if len(regs) == 0 {
		return c.registerMsg, len(c.regs)
	}
	frame, err := wire.Marshal(wire.Register{Type: wire.TypeRegister, Agents: regs, ProviderName: c.cfg.ProviderName})
	if err != nil { // the whole roster encoded in New; a part of it does
		return c.registerMsg, len(c.regs)
	}
	return frame, len(regs)
}

// registerFrame is registerFrameLocked taking c.mu.
func (c *Client) registerFrame() ([]byte, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.registerFrameLocked()
}

// handleTaken answers funduq's notice that another link of this key took
// name (taken) or that no link serves it any more (freed).
func (c *Client) handleTaken(l *link, name string, taken bool) {
	if _, ok := c.agents[name]; !ok {
		c.log.Debug("funduq named an agent this client does not serve; ignored", "agent", name, "taken", taken)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if taken {
		if c.taken == nil {
			c.taken = make(map[string]bool)
		}
		c.taken[name] = true
		c.log.Info("another process of this key took over an agent; leaving it out of later registers", "agent", name)
		return
	}
	if !c.taken[name] {
		return // served here, or never taken: nothing to take back
	}
	delete(c.taken, name)
	if c.link != l || l.leaving != nil || c.replaced.Load() {
		// Shutting down, or between links: the next register (if any)
		// names it again.
		c.log.Info("an agent another process of this key took is free again", "agent", name)
		return
	}
	frame, n := c.registerFrameLocked()
	l.ctrl = append(l.ctrl, ctrlFrame{data: frame})
	c.notifyLocked()
	c.log.Info("an agent another process of this key took is free again; registering it", "agent", name, "agents", n)
}
