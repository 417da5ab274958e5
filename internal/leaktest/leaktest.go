// Package leaktest is the goroutine-leak check every test binary of this
// module runs from its TestMain: goleak, with the one list of goroutines
// that are known to outlive a clean Close and so are not leaks.
//
// Main is strict. MainWithPools also ignores what the PostgreSQL and Redis
// client pools leave for a moment after Close: pgx's health check and a
// connection's reader parked in the poller (go-redis's pool closes its
// sockets asynchronously). Tests that never open a pool use Main, so a
// leaked network read in them still fails.
package leaktest

import (
	"testing"

	"go.uber.org/goleak"
)

// poolStragglers are the goroutines the storage pools stop shortly after
// Close, asynchronously.
var poolStragglers = []goleak.Option{
	goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
	goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
}

// Main runs the package's tests, then fails the binary if any goroutine
// other than those opts allow is still running.
func Main(m *testing.M, opts ...goleak.Option) {
	goleak.VerifyTestMain(m, opts...)
}

// MainWithPools is Main for packages whose tests open PostgreSQL or Redis
// pools.
func MainWithPools(m *testing.M, opts ...goleak.Option) {
	goleak.VerifyTestMain(m, append(append([]goleak.Option(nil), poolStragglers...), opts...)...)
}
