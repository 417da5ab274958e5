package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Lease is one node's handle on the lease key.
type Lease struct {
	rdb   redis.UniversalClient
	key   string
	value string // "<node id> <random token>": ours alone
	ttl   time.Duration
}

// New makes a handle for nodeID on key with ttl.
func New(rdb redis.UniversalClient, key, nodeID string, ttl time.Duration) *Lease {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return &Lease{rdb: rdb, key: key, value: nodeID + " " + hex.EncodeToString(b[:]), ttl: ttl}
}

// Key is the lease key.
func (l *Lease) Key() string { return l.key }

// TTL is the lease's time to live.
func (l *Lease) TTL() time.Duration { return l.ttl }

var (
	// acquireScript sets the lease if nobody holds it, and takes it as
	// ours when it already holds our value: a campaign whose SET landed
	// but whose reply came too late (design.md §Failure, the lease).
	acquireScript = redis.NewScript(`
local cur = redis.call("GET", KEYS[1])
if cur == ARGV[1] then
  return redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
if cur then
  return 0
end
redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
return 1`)
	renewScript = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
return 0`)
	releaseScript = redis.NewScript(`
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
return 0`)
)

// Acquire takes the lease if nobody holds it, or if it holds our value
// already: an earlier Acquire that timed out may have set it, and nobody
// else may take it until it expires, so the lease is ours — the TTL
// counts again from now.
func (l *Lease) Acquire(ctx context.Context) (bool, error) {
	n, err := acquireScript.Run(ctx, l.rdb, []string{l.key}, l.value, l.ttl.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("acquire lease %s: %w", l.key, err)
	}
	return n == 1, nil
}

// Renew extends the lease if it is still ours; false means it is not.
func (l *Lease) Renew(ctx context.Context) (bool, error) {
	n, err := renewScript.Run(ctx, l.rdb, []string{l.key}, l.value, l.ttl.Milliseconds()).Int()
	if err != nil {
		return false, fmt.Errorf("renew lease %s: %w", l.key, err)
	}
	return n == 1, nil
}

// Release gives the lease up if it is still ours.
func (l *Lease) Release(ctx context.Context) (bool, error) {
	n, err := releaseScript.Run(ctx, l.rdb, []string{l.key}, l.value).Int()
	if err != nil {
		return false, fmt.Errorf("release lease %s: %w", l.key, err)
	}
	return n == 1, nil
}

// Holder is who holds a lease key now.
type Holder struct {
	NodeID string
	Left   time.Duration // time to live left
}

// ErrNoHolder: nobody holds the lease.
var ErrNoHolder = errors.New("nobody holds the lease")

// ReadHolder reads who holds key and for how long yet.
func ReadHolder(ctx context.Context, rdb redis.UniversalClient, key string) (Holder, error) {
	pipe := rdb.Pipeline()
	get := pipe.Get(ctx, key)
	ttl := pipe.PTTL(ctx, key)
	_, err := pipe.Exec(ctx)
	if errors.Is(err, redis.Nil) {
		return Holder{}, ErrNoHolder
	}
	if err != nil {
		return Holder{}, fmt.Errorf("read lease %s: %w", key, err)
	}
	// The token is hex and last: a node ID may hold spaces of its own
	// (FUNDUQ_NODE_ID is the operator's), and it is the whole ID that the
	// leader row names (design.md §Deployment, "A takeover under way").
	node := get.Val()
	if i := strings.LastIndexByte(node, ' '); i >= 0 {
		node = node[:i]
	}
	return Holder{NodeID: node, Left: ttl.Val()}, nil
}
