// Command lambda is the A2A door's AWS Lambda entry: the a2a.Handler served
// behind API Gateway (a streaming REST proxy integration:
// door.WrapAPIGateway), so message/stream and tasks/resubscribe reach the
// caller as they happen.
// Configuration is read once, at start (door.RunLambda). A stream ends
// before the invocation's deadline with an SSE comment, then a JSON-RPC
// error -32048 (what A2A clients read), saying how to resume
// (tasks/resubscribe or SubscribeToTask with Last-Event-ID).
package main

import (
	"log/slog"
	"net/http"

	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/functions/a2a"
	"github.com/funduq/funduq-go/functions/door"
)

func build(deps *door.Deps, log *slog.Logger) (http.Handler, error) {
	return a2a.New(a2a.Options{Store: deps.Store, Feed: deps.Feed, Funduq: deps.Funduq,
		TokenSecret: deps.TokenSecret, Log: log, AuthorizedKey: door.LambdaAuthorizedKey, Limits: deps.Limits})
}

// newHandler builds the door from its configuration.
func newHandler(cfg config.Door, log *slog.Logger) (http.Handler, func(), error) {
	return door.NewLambdaHandler(cfg, log, build)
}

func main() { door.RunLambda("a2a", build) }
