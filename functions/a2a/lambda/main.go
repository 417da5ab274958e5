// Command lambda is the A2A door's AWS Lambda entry: the a2a.Handler served
// through a Function URL with response streaming (lambdaurl), so
// message/stream and tasks/resubscribe reach the caller as they happen.
// Configuration is read once here (config.ParseDoor); nothing below reads
// the environment. A stream ends before the invocation's deadline with an
// SSE comment saying how to resume (tasks/resubscribe or SubscribeToTask
// with Last-Event-ID).
package main

import (
	"fmt"
	"log/slog"
	"net/http"
	"os"

	"github.com/aws/aws-lambda-go/lambdaurl"

	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/functions/a2a"
	"github.com/funduq/funduq-go/functions/door"
)

// AuthenticatedKeyHeader carries the caller's authenticated public key from
// a trusted front; it is believed only on IAM-authenticated invocations
// (the same rule as the AG-UI door's entry).
const AuthenticatedKeyHeader = "X-Funduq-Authenticated-Key"

func authorizedKey(r *http.Request) string {
	req, ok := lambdaurl.RequestFromContext(r.Context())
	if !ok || req.RequestContext.Authorizer == nil || req.RequestContext.Authorizer.IAM == nil {
		return ""
	}
	if k := r.Header.Get(AuthenticatedKeyHeader); identity.IsPublicKeyHex(k) {
		return k
	}
	return ""
}

func newHandler(cfg config.Door, log *slog.Logger) (http.Handler, func(), error) {
	deps, err := door.Connect(cfg, door.ConnectOptions{MaxConns: 2, Log: log})
	if err != nil {
		return nil, nil, err
	}
	h, err := a2a.New(a2a.Options{Store: deps.Store, Feed: deps.Feed, Funduq: deps.Funduq,
		TokenSecret: deps.TokenSecret, Log: log, AuthorizedKey: authorizedKey})
	if err != nil {
		deps.Close()
		return nil, nil, err
	}
	return h, deps.Close, nil
}

func main() {
	cfg, err := config.ParseDoor(config.FromList(os.Environ()))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	h, closeFn, err := newHandler(cfg, log)
	if err != nil {
		log.Error("a2a door: start", "err", err)
		os.Exit(1)
	}
	defer closeFn()
	lambdaurl.Start(h)
}
