package door_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/internal/leaktest"
)

// quiet drops go-redis's own log lines (every failed dial while a test's
// Redis is down).
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quiet{})
	leaktest.MainWithPools(m)
}
