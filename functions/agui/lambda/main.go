// Command lambda is the AG-UI door's AWS Lambda entry: the agui.Handler
// served through a Function URL with response streaming (lambdaurl), so a
// run's SSE stream reaches the caller as it happens. Configuration is read
// once, at start (door.RunLambda); nothing below reads the environment.
//
// A stream ends before the invocation's deadline: the handler reads the
// deadline from the request context and closes the stream DeadlineMargin
// early with an SSE comment telling the client to reconnect to
// GET /runs/{runId}/events with Last-Event-ID.
package main

import (
	"log/slog"
	"net/http"

	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/functions/agui"
	"github.com/funduq/funduq-go/functions/door"
)

// AuthenticatedKeyHeader is the trusted front's header (door.AuthenticatedKeyHeader).
const AuthenticatedKeyHeader = door.AuthenticatedKeyHeader

var authorizedKey = door.LambdaAuthorizedKey

func build(deps *door.Deps, log *slog.Logger) (http.Handler, error) {
	return agui.New(agui.Options{Store: deps.Store, Feed: deps.Feed, Funduq: deps.Funduq,
		TokenSecret: deps.TokenSecret, Log: log, AuthorizedKey: authorizedKey, Limits: deps.Limits})
}

// newHandler builds the door from its configuration.
func newHandler(cfg config.Door, log *slog.Logger) (http.Handler, func(), error) {
	return door.NewLambdaHandler(cfg, log, build)
}

func main() { door.RunLambda("agui", build) }
