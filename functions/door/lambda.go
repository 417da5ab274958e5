package door

import (
	"fmt"
	"log/slog"
	"net/http"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/funduq/funduq-go/core/config"
)

// Build makes a door's handler on its connections.
type Build func(deps *Deps, log *slog.Logger) (http.Handler, error)

// NewLambdaHandler connects a door from its configuration and builds it;
// close releases the connections.
func NewLambdaHandler(cfg config.Door, log *slog.Logger, build Build) (h http.Handler, close func(), err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	deps, err := Connect(cfg, ConnectOptions{MaxConns: 2, Log: log})
	if err != nil {
		return nil, nil, err
	}
	h, err = build(deps, log)
	if err != nil {
		deps.Close()
		return nil, nil, err
	}
	return h, deps.Close, nil
}

// RunLambda is a door's Lambda main: configuration read once from the
// environment (config.ParseDoor), JSON logs, the door served behind an API
// Gateway REST API whose Lambda proxy integration streams
// (WrapAPIGateway). It does not return.
func RunLambda(name string, build Build) {
	cfg, err := config.ParseDoor(config.FromList(os.Environ()))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel})).With("door", name)
	h, closeFn, err := NewLambdaHandler(cfg, log, build)
	if err != nil {
		log.Error("door could not start", "err", err)
		os.Exit(1)
	}
	defer closeFn()
	lambda.Start(WrapAPIGateway(h, log))
}
