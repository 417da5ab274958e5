package tickets_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/broker-node/tickets"
)

// While Redis is down a node cannot read the lease's holder, so it cannot
// check the leader's identity key: its log says Redis could not be
// reached, and where, not that the key could not be checked (which sent
// an operator after a key mismatch that was not there). Another failure
// of the check keeps the identity-key words.
func TestHandlerLogsRedisUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String() // nothing listens here once closed
	ln.Close()
	rdb := redis.NewClient(&redis.Options{Addr: closed, DialerRetries: 1, MaxRetries: -1})
	defer rdb.Close()
	// As the node's reader does: the lease's holder, in Redis, first.
	holder := func(ctx context.Context) (string, error) {
		h, err := rdb.Get(ctx, "x:lease").Result()
		if err != nil {
			return "", fmt.Errorf("read the lease's holder: %w", err)
		}
		return h, nil
	}
	for _, tc := range []struct {
		name      string
		published func(context.Context) (string, error)
		msg       string
		addr      any
	}{
		{"redis down", holder, "tickets: Redis could not be reached; the leader's identity key is unchecked", closed},
		// PostgreSQL out of reach (the leader row) is a network error
		// too, but not Redis's.
		{"postgres down", func(ctx context.Context) (string, error) {
			c, err := pgconn.Connect(ctx, "postgres://postgres@"+closed+"/x?sslmode=disable")
			if err == nil {
				c.Close(ctx)
				return "", errors.New("connected to a closed port")
			}
			return "", err
		}, "tickets: could not check the leader's identity key", nil},
		{"other", func(context.Context) (string, error) { return "", errors.New("no leader row") },
			"tickets: could not check the leader's identity key", nil},
	} {
		var logs bytes.Buffer
		h := tickets.LimitedHandler(tickets.New(rdb, "x:"), funduqKey, slog.New(slog.NewJSONHandler(&logs, nil)),
			tickets.HandlerOptions{PublishedKey: tc.published})
		rec := do(t, h, http.MethodPost, `{"publicKey": "`+keyA+`"}`)
		if rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("%s: status %d, want 503", tc.name, rec.Code)
		}
		var line map[string]any
		if err := json.Unmarshal(logs.Bytes(), &line); err != nil {
			t.Fatalf("%s: not one JSON log line: %q", tc.name, logs.String())
		}
		if line["level"] != "ERROR" || line["msg"] != tc.msg || line["redis_addr"] != tc.addr ||
			!strings.Contains(fmt.Sprint(line["err"]), "read the lease's holder") && tc.addr != nil {
			t.Errorf("%s: logged %s; want ERROR %q with redis_addr %v", tc.name, logs.String(), tc.msg, tc.addr)
		}
	}
}
