// Command lambda is the KYOK door's AWS Lambda entry: the kyok.Handler
// served behind API Gateway (a streaming REST proxy integration:
// door.WrapAPIGateway), so a streamed completion reaches the agent chunk by
// chunk. Configuration is
// read once, at start (door.RunLambda).
package main

import (
	"log/slog"
	"net/http"

	"github.com/funduq/funduq-go/functions/door"
	"github.com/funduq/funduq-go/functions/kyok"
)

func build(deps *door.Deps, log *slog.Logger) (http.Handler, error) {
	return kyok.New(kyok.Options{Store: deps.Store, Redis: deps.Redis, Prefix: deps.Prefix,
		TokenSecret: deps.TokenSecret, Log: log, MaxBody: deps.Limits.MaxKyokBody, MaxJSONDepth: deps.Limits.MaxJSONDepth})
}

func main() { door.RunLambda("kyok", build) }
