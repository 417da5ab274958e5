package main

import (
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/redistest"
	"github.com/funduq/funduq-go/core/store/storetest"
	"github.com/funduq/funduq-go/functions/door"
)

// A cold start over a database nobody migrated answers a completion in
// the KYOK door's own envelope: 503 schema_not_migrated with Retry-After.
// (On main: 500.)
func TestLambdaOverAnUnmigratedDatabase(t *testing.T) {
	handler, closeFn, err := door.NewLambdaHandler(config.Door{
		Storage:  config.Storage{DatabaseURL: storetest.EmptyURL(t), RedisURL: redistest.URL()},
		Identity: config.Identity{IdentityKey: nodetest.SeedHex(0xb6), TokenSecret: nodetest.TokenSecret},
	}, nil, build)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const path = "/kyok/v1/chat/completions"
	resp, err := door.WrapAPIGateway(handler, nil)(ctx, &events.APIGatewayProxyRequest{HTTPMethod: "POST", Path: path,
		Body:           `{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		Headers:        map[string]string{"content-type": "application/json", "authorization": "Bearer not-a-token"},
		RequestContext: events.APIGatewayProxyRequestContext{DomainName: "door.example", HTTPMethod: "POST", Path: path}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	var e struct{ Error struct{ Code, Type string } }
	if json.Unmarshal(b, &e) != nil || resp.StatusCode != 503 || resp.Headers["Retry-After"] == "" ||
		e.Error.Code != "schema_not_migrated" || e.Error.Type != "schema_not_migrated" {
		t.Fatalf("completion: %d %v %s; want 503 schema_not_migrated with Retry-After in the KYOK envelope", resp.StatusCode, resp.Headers, b)
	}
}
