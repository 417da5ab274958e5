// Command lambda is the AG-UI door's AWS Lambda entry: the agui.Handler
// served behind API Gateway (a REST API whose Lambda proxy integration
// streams: door.WrapAPIGateway), so a run's SSE stream reaches the caller
// as it happens. The caller's authenticated key is the one the API
// Gateway authorizer put in requestContext.authorizer (door.AuthenticatedKey). Configuration is read
// once, at start (door.RunLambda); nothing below reads the environment.
//
// A stream ends before the invocation's deadline: the handler reads the
// deadline from the request context and closes the stream DeadlineMargin
// early with an SSE comment, then a CUSTOM funduq.stream_ended event (what
// AG-UI clients read), telling the client to reconnect to
// GET /runs/{runId}/events with Last-Event-ID.
package main

import (
	"log/slog"
	"net/http"

	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/functions/agui"
	"github.com/funduq/funduq-go/functions/door"
)

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
