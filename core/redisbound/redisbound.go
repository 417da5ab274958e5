// Package redisbound bounds each wait funduq makes on Redis by funduq's
// own clock rather than the Redis client's (design.md §Failure). go-redis
// bounds a blocking read (XREAD BLOCK) by its block plus 10 s, and any
// other command — and the set-up of a new connection — by the client's read
// timeout, which a Redis URL may turn off (read_timeout=0: go-redis then
// waits for ever on a connection that was accepted and is never answered).
// A cancelled context does not cut such a read short either: only a
// deadline does, and only on a client with ContextTimeoutEnabled (as
// door.Connect and the broker node build theirs).
package redisbound

import (
	"context"
	"time"
)

// Slack is how long past its block a blocking read waits for Redis's
// answer, and how long any other single command may take, before it
// fails: a hung Redis (connections accepted, never answered) costs a
// caller its block and this. It matches the doors' storage bound
// (functions/door StorageTimeout).
const Slack = 1500 * time.Millisecond

// Blocking bounds one blocking read of block (XREAD BLOCK, say; 0 or
// less: one that does not block) at block + Slack.
func Blocking(ctx context.Context, block time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, max(block, 0)+Slack)
}

// Call bounds one command that does not block at Slack.
func Call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, Slack)
}
