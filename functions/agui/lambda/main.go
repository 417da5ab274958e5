// Command lambda is the AG-UI door's AWS Lambda entry: the agui.Handler
// served through a Function URL with response streaming (lambdaurl), so a
// run's SSE stream reaches the caller as it happens. Configuration is read
// once here (config.ParseDoor); nothing below reads the environment.
//
// A stream ends before the invocation's deadline: the handler reads the
// deadline from the request context and closes the stream DeadlineMargin
// early with an SSE comment telling the client to reconnect to
// GET /runs/{runId}/events with Last-Event-ID.
package main

import (
	"fmt"
	"log/slog"
	"net/http"
	"os"

	"github.com/aws/aws-lambda-go/lambdaurl"

	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/functions/agui"
	"github.com/funduq/funduq-go/functions/door"
)

// AuthenticatedKeyHeader carries the caller's authenticated public key when
// a trusted front (API Gateway or CloudFront with a Lambda authorizer)
// invokes the Function URL. It is believed only on IAM-authenticated
// invocations: a Function URL with AuthType AWS_IAM can only be reached by
// a signed caller, i.e. the front itself, which overwrites the header from
// its authorizer's context. On a public (AuthType NONE) URL the header is
// ignored and the Funduq-Presenter header is the only seat.
const AuthenticatedKeyHeader = "X-Funduq-Authenticated-Key"

// authorizedKey is the authorizer seat (D12) for agui.Options.AuthorizedKey.
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

// newHandler builds the door from its configuration.
func newHandler(cfg config.Door, log *slog.Logger) (http.Handler, func(), error) {
	deps, err := door.Connect(cfg, door.ConnectOptions{MaxConns: 2, Log: log})
	if err != nil {
		return nil, nil, err
	}
	h, err := agui.New(agui.Options{Store: deps.Store, Feed: deps.Feed, Funduq: deps.Funduq,
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
		log.Error("agui door: start", "err", err)
		os.Exit(1)
	}
	defer closeFn()
	lambdaurl.Start(h)
}
