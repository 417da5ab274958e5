package door

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/redislog"
)

// Build makes a door's handler on its connections.
type Build func(deps *Deps, log *slog.Logger) (http.Handler, error)

// NewLambdaHandler connects a door from its configuration and builds it;
// close releases the connections.
func NewLambdaHandler(cfg config.Door, log *slog.Logger, build Build) (h http.Handler, close func(), err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// go-redis's own messages (a pool that cannot dial) go to the door's
	// JSON log, not as plain text to the function's stderr (redislog).
	redislog.Use(log)
	deps, err := Connect(cfg, ConnectOptions{MaxConns: 2, Log: log})
	if err != nil {
		return nil, nil, err
	}
	h, err = build(deps, log)
	if err != nil {
		deps.Close()
		return nil, nil, err
	}
	// One read of the schema version a cold start: a schema behind this
	// binary is answered 503 schema_not_migrated, not a 500 a request
	// (design.md §Deployment); storage unreachable now is read again on
	// the next request.
	deps.Schema = NewSchemaGate(deps.Store, log)
	_ = deps.Schema.Check(context.Background())
	return deps.Schema.Guard(h), deps.Close, nil
}

// lambdaConfig reads a door's configuration from environ; an error names
// the program, as the broker node's do ("broker-node: configuration: …").
func lambdaConfig(name string, environ []string) (config.Door, error) {
	cfg, err := config.ParseDoor(config.FromList(environ))
	if err != nil {
		return config.Door{}, fmt.Errorf("%s door: %w", name, err)
	}
	return cfg, nil
}

// RunLambda is a door's Lambda main: configuration read once from the
// environment (config.ParseDoor), JSON logs, the door served behind an API
// Gateway REST API whose Lambda proxy integration streams
// (WrapAPIGateway). It does not return.
func RunLambda(name string, build Build) {
	cfg, err := lambdaConfig(name, os.Environ())
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
