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
	resp, b := completionThroughAPIGateway(t, storetest.EmptyURL(t), `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, nil)
	var e struct{ Error struct{ Code, Type string } }
	if json.Unmarshal(b, &e) != nil || resp.StatusCode != 503 || resp.Headers["Retry-After"] == "" ||
		e.Error.Code != "schema_not_migrated" || e.Error.Type != "schema_not_migrated" {
		t.Fatalf("completion: %d %v %s; want 503 schema_not_migrated with Retry-After in the KYOK envelope", resp.StatusCode, resp.Headers, b)
	}
}

// completionThroughAPIGateway sends body as a completion to a cold KYOK
// door over the database at dbURL, through API Gateway's REST event, with
// authorizer as the authorizer's context (nil: none), and returns the
// response and its body.
func completionThroughAPIGateway(t *testing.T, dbURL, body string, authorizer map[string]any) (*events.APIGatewayProxyStreamingResponse, []byte) {
	t.Helper()
	handler, closeFn, err := door.NewLambdaHandler(config.Door{
		Storage:  config.Storage{DatabaseURL: dbURL, RedisURL: redistest.URL()},
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
		Body:    body,
		Headers: map[string]string{"content-type": "application/json", "authorization": "Bearer not-a-token"},
		RequestContext: events.APIGatewayProxyRequestContext{DomainName: "door.example", HTTPMethod: "POST", Path: path,
			Authorizer: authorizer}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}
