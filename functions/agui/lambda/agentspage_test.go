package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
)

// Through the Lambda entry, GET /agents with 300 agents of 60 KB metadata
// each (18 MB in all) answers within the 6 MB a Lambda function may
// return: a page, then each next one by ?after= (the query string as API
// Gateway hands it over), every agent once. (On main: one 18 MB answer,
// which Lambda refuses to return.)
func TestLambdaAgentsPagesFitAResponse(t *testing.T) {
	h := nodetest.Start(t, nil)
	handler, closeFn, err := newHandler(config.Door{Storage: h.Cfg.Storage, Identity: h.Cfg.Identity}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeFn)
	ctx := context.Background()
	if _, err := h.DB().Exec(ctx, `INSERT INTO providers (public_key, fingerprint)
		SELECT lpad(to_hex(k), 64, '0'), lpad(to_hex(k), 16, '0') FROM generate_series(1, 30) k`); err != nil {
		t.Fatal(err)
	}
	if _, err := h.DB().Exec(ctx, `INSERT INTO agents (provider_key, name, metadata)
		SELECT lpad(to_hex(k), 64, '0'), 'a' || i, json_build_object('pad', repeat('x', 60000))::jsonb
		FROM generate_series(1, 30) k, generate_series(1, 10) i`); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	after, pages := "", 0
	for {
		req := get("/agents", nil)
		req.QueryStringParameters = map[string]string{"limit": "500"}
		if after != "" {
			req.QueryStringParameters["after"] = after
		}
		code, hdr, body := invoke(t, handler, time.Now().Add(time.Minute), req)
		if code != 200 || len(body) > 6_000_000 {
			t.Fatalf("page %d: %d %v, %d bytes", pages+1, code, hdr, len(body))
		}
		var list struct {
			Agents    []struct{ ProviderKey, Name string }
			HasMore   bool   `json:"has_more"`
			NextAfter string `json:"next_after"`
		}
		if err := json.Unmarshal([]byte(body), &list); err != nil {
			t.Fatal(err)
		}
		for _, a := range list.Agents {
			if seen[a.ProviderKey+"/"+a.Name] {
				t.Fatalf("page %d lists %s/%s again", pages+1, a.ProviderKey, a.Name)
			}
			seen[a.ProviderKey+"/"+a.Name] = true
		}
		pages++
		if !list.HasMore {
			break
		}
		if pages > 20 {
			t.Fatalf("no end after %d pages", pages)
		}
		after = list.NextAfter
	}
	if pages < 3 || len(seen) != 300 {
		t.Fatalf("%d pages read %d agents, want 300 over at least 3", pages, len(seen))
	}
}
