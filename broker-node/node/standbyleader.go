package node

import (
	"context"
	"errors"

	"github.com/funduq/funduq-go/broker-node/console"
	"github.com/funduq/funduq-go/broker-node/lease"
	"github.com/funduq/funduq-go/core/redisbound"
)

// Why a standby that cannot read the leader row names no leader from
// Redis either: said in its refusal (public words, no address or node ID).
const (
	whyRedis    = "Redis is out of reach too"
	whyNoHolder = "nobody holds the lease: a leader is being elected"
	whyNotYet   = "the lease's holder has not begun leading"
)

// leaderFromRedis names the leader's advertised URL from Redis alone, for
// a standby that cannot read the leader row (design.md §Deployment, "A
// standby without PostgreSQL"): the lease's holder, when its announcement
// in the nodes hash (console.Announce) is current and says it leads — it
// took its epoch, as the row's holder has. Without it a provider whose one
// URL names this standby was told nobody and retried here for as long as
// the database was out of reach. why says, for the refusal, why no leader
// is named ("" when one is).
func (n *Node) leaderFromRedis(ctx context.Context) (url, why string) {
	ctx, cancel := redisbound.Call(ctx)
	defer cancel()
	h, err := lease.ReadHolder(ctx, n.rdb, LeaseKey(n.prefix))
	switch {
	case errors.Is(err, lease.ErrNoHolder):
		return "", whyNoHolder
	case err != nil:
		return "", whyRedis
	}
	if h.NodeID == n.cfg.NodeID {
		return "", whyNotYet // this node, not leading: naming it would send the provider back here
	}
	seen, err := console.Seen(ctx, n.rdb, NodesKey(n.prefix))
	if err != nil {
		return "", whyRedis
	}
	for _, s := range seen {
		if s.NodeID == h.NodeID && s.Role == "leader" && s.AdvertiseURL != "" {
			return s.AdvertiseURL, ""
		}
	}
	return "", whyNotYet
}
