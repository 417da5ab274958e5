package main

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/redistest"
	"github.com/funduq/funduq-go/core/store/storetest"
	"github.com/funduq/funduq-go/functions/door"
)

// A completion behind the authorizer whose body is not the one its
// presenter signature covers is refused before the door in the KYOK
// door's own (OpenAI-style) envelope, as its other refusals are: 401 with
// error.code and error.type presenter_body_mismatch. On main it was the
// doors' generic envelope, without the type an OpenAI client reads.
func TestOutsideBodyOtherThanTheSignedOneInTheKyokEnvelope(t *testing.T) {
	handler, closeFn, err := door.NewLambdaHandler(config.Door{
		Storage:  config.Storage{DatabaseURL: storetest.URL(t), RedisURL: redistest.URL()},
		Identity: config.Identity{IdentityKey: nodetest.SeedHex(0xb6), TokenSecret: nodetest.TokenSecret},
	}, nil, build)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const path = "/kyok/v1/chat/completions"
	signed := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	resp, err := door.WrapAPIGateway(handler, nil)(ctx, &events.APIGatewayProxyRequest{HTTPMethod: "POST", Path: path,
		Body:    strings.Replace(signed, `"hi"`, `"bye"`, 1),
		Headers: map[string]string{"content-type": "application/json", "authorization": "Bearer not-a-token"},
		RequestContext: events.APIGatewayProxyRequestContext{DomainName: "door.example", HTTPMethod: "POST", Path: path,
			Authorizer: map[string]any{door.AuthorizerKeyField: strings.Repeat("ab", 32),
				door.AuthorizerBodyField: identity.SHA256Hex([]byte(signed))}}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	var e struct {
		Error struct{ Code, Type, Message string }
	}
	if json.Unmarshal(b, &e) != nil || resp.StatusCode != 401 || e.Error.Code != door.CodeBodyMismatch ||
		e.Error.Type != door.CodeBodyMismatch || e.Error.Message == "" {
		t.Fatalf("another body than the signed one: %d %s; want 401 %s in the KYOK envelope (code and type)",
			resp.StatusCode, b, door.CodeBodyMismatch)
	}
}
