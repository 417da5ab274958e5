// Command lambda is the API Gateway REQUEST authorizer's Lambda entry
// (authorizer.Authorizer): configuration read once from the environment,
// JSON logs. It is deployed by template.yaml in front of every door route.
package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/functions/authorizer"
)

func newAuthorizer(environ []string) (*authorizer.Authorizer, *slog.Logger, error) {
	cfg, err := authorizer.ParseConfig(config.FromList(environ))
	if err != nil {
		return nil, nil, err
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("function", "authorizer")
	a, err := authorizer.New(cfg, authorizer.Options{Log: log})
	return a, log, err
}

func main() {
	a, _, err := newAuthorizer(os.Environ())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	lambda.Start(a.Authorize)
}
