package door

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/funduq/funduq-go/core/store"
)

// AgentCacheTTL is how long FindAgentCached trusts an agent it resolved.
// A run's path names its agent on every request, and the identity a run
// needs from it (the provider key a fingerprint names, the name) never
// changes while the row exists; whether anyone serves the agent is the
// broker's to decide, not a door's (design.md D8). So a door may keep it
// briefly: one look-up a second per agent instead of one per run. An agent
// deleted meanwhile (DeleteAgent, only without history) is caught by the
// insert's foreign key (store.ErrAgentGone, see AgentGone).
const AgentCacheTTL = time.Second

// agentCacheMax bounds the cache; past it, expired entries go, then all.
const agentCacheMax = 4096

type agentCacheKey struct {
	st             *store.Store
	provider, name string
}

type agentCacheEntry struct {
	agent store.Agent
	until time.Time
}

var agentCache = struct {
	sync.Mutex
	m map[agentCacheKey]agentCacheEntry
}{m: map[agentCacheKey]agentCacheEntry{}}

// FindAgentCached is FindAgent for the paths that start or follow runs,
// answering from what this process resolved in the last AgentCacheTTL.
// Only agents found are kept: an unknown agent is looked up every time, so
// one registered a moment ago is found at once.
func FindAgentCached(ctx context.Context, st *store.Store, provider, name string) (store.Agent, error) {
	k := agentCacheKey{st, provider, name}
	now := time.Now()
	agentCache.Lock()
	e, ok := agentCache.m[k]
	agentCache.Unlock()
	if ok && now.Before(e.until) {
		return e.agent, nil
	}
	a, err := FindAgent(ctx, st, provider, name)
	if err != nil {
		return a, err
	}
	agentCache.Lock()
	if len(agentCache.m) >= agentCacheMax {
		for key, e := range agentCache.m {
			if !now.Before(e.until) {
				delete(agentCache.m, key)
			}
		}
		if len(agentCache.m) >= agentCacheMax {
			clear(agentCache.m)
		}
	}
	agentCache.m[k] = agentCacheEntry{agent: a, until: now.Add(AgentCacheTTL)}
	agentCache.Unlock()
	return a, nil
}

// forgetAgent drops every cached resolution of the agent.
func forgetAgent(providerKey, name string) {
	agentCache.Lock()
	for key, e := range agentCache.m {
		if e.agent.ProviderKey == providerKey && e.agent.Name == name {
			delete(agentCache.m, key)
		}
	}
	agentCache.Unlock()
}

// AgentGone maps store.ErrAgentGone — the agent FindAgentCached returned
// was deleted before the run's insert — to the refusal an unknown agent
// gets, and forgets the agent; other errors pass unchanged.
func AgentGone(err error, a store.Agent) error {
	if !errors.Is(err, store.ErrAgentGone) {
		return err
	}
	forgetAgent(a.ProviderKey, a.Name)
	return Refuse(http.StatusNotFound, CodeAgentNotFound, "no agent %s is registered by %s", a.Name, a.ProviderKey)
}
