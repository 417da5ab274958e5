package lambdatest

import (
	"log/slog"
	"net/http"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/redistest"
	"github.com/funduq/funduq-go/core/store/storetest"
)

// NewHandler is a door Lambda's own constructor of its handler (each
// lambda's newHandler): the handler and what closes its connections.
type NewHandler func(config.Door, *slog.Logger) (http.Handler, func(), error)

// StartUnmigrated starts a door's Lambda handler (newHandler, logging to
// log; nil: the door's default) cold over a database nobody migrated — an
// empty one of the test's own, the tests' Redis, the identity the
// harness's providers trust — and closes it when the test ends: the set-up
// of the doors' schema tests (a cold start before `broker-node migrate`).
func StartUnmigrated(t testing.TB, newHandler NewHandler, log *slog.Logger) http.Handler {
	t.Helper()
	handler, closeFn, err := newHandler(config.Door{
		Storage:  config.Storage{DatabaseURL: storetest.EmptyURL(t), RedisURL: redistest.URL()},
		Identity: config.Identity{IdentityKey: nodetest.SeedHex(0xb6), TokenSecret: nodetest.TokenSecret},
	}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeFn)
	return handler
}
