package door

import (
	"fmt"
	"log/slog"
	"net/http"
	"os"

	"github.com/aws/aws-lambda-go/lambdaurl"

	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/identity"
)

// AuthenticatedKeyHeader carries the caller's authenticated public key when
// a trusted front (API Gateway or CloudFront with a Lambda authorizer)
// invokes a door's Function URL. It is believed only on IAM-authenticated
// invocations: a Function URL with AuthType AWS_IAM can only be reached by
// a signed caller, i.e. the front itself, which overwrites the header from
// its authorizer's context. On a public (AuthType NONE) URL the header is
// ignored and the Funduq-Presenter header is the only seat (D12).
const AuthenticatedKeyHeader = "X-Funduq-Authenticated-Key"

// LambdaAuthorizedKey is the authorizer seat (D12) of a door served
// through lambdaurl: the front's authenticated key, or "".
func LambdaAuthorizedKey(r *http.Request) string {
	req, ok := lambdaurl.RequestFromContext(r.Context())
	if !ok || req.RequestContext.Authorizer == nil || req.RequestContext.Authorizer.IAM == nil {
		return ""
	}
	if k := r.Header.Get(AuthenticatedKeyHeader); identity.IsPublicKeyHex(k) {
		return k
	}
	return ""
}

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
// environment (config.ParseDoor), JSON logs, the door served through a
// Function URL with response streaming (lambdaurl). It does not return.
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
	lambdaurl.Start(h)
}
