// Package redistest gives tests a real Redis client and a key prefix of
// their own. It is for tests only: it reads FUNDUQ_TEST_REDIS_URL and, when no
// server answers, skips — or fails when CI=true. Tests share one Redis
// database, so everything a test writes goes under its Prefix, and the keys
// are deleted when the test ends.
package redistest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultURL is used when FUNDUQ_TEST_REDIS_URL is unset.
const DefaultURL = "redis://127.0.0.1:6379/0"

// URL is the Redis the tests use.
func URL() string {
	if u := os.Getenv("FUNDUQ_TEST_REDIS_URL"); u != "" {
		return u
	}
	return DefaultURL
}

var counter atomic.Int64

// Client returns a client on the test Redis and a key prefix unique to this
// test ("funduqtest:<pid>:<n>:"). The client is closed and the prefix's keys
// deleted when the test ends.
func Client(t testing.TB) (*redis.Client, string) {
	t.Helper()
	opt, err := redis.ParseURL(URL())
	if err != nil {
		t.Fatalf("FUNDUQ_TEST_REDIS_URL: %v", err)
	}
	c := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		if os.Getenv("CI") == "true" {
			t.Fatalf("Redis at %s is required under CI=true and is not reachable: %v", opt.Addr, err)
		}
		t.Skipf("Redis at %s not reachable (%v): run the tests with scripts/test, which starts it", opt.Addr, err)
	}
	prefix := fmt.Sprintf("funduqtest:%d:%d:", os.Getpid(), counter.Add(1))
	t.Cleanup(func() {
		ctx := context.Background()
		var keys []string
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if len(keys) > 0 {
			c.Del(ctx, keys...)
		}
		c.Close()
	})
	return c, prefix
}

// Keys lists the keys under prefix (for assertions).
func Keys(t testing.TB, c *redis.Client, prefix string) []string {
	t.Helper()
	keys, err := c.Keys(context.Background(), prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		keys[i] = strings.TrimPrefix(k, prefix)
	}
	return keys
}
