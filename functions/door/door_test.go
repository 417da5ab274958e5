package door_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/funduq/funduq-go/broker-node/node"
	"github.com/funduq/funduq-go/functions/door"
)

// The doors read the live feed under the prefix the broker node writes it.
func TestRedisPrefixIsTheBrokers(t *testing.T) {
	if door.RedisPrefix != node.KeyPrefix {
		t.Fatalf("door.RedisPrefix %q != node.KeyPrefix %q", door.RedisPrefix, node.KeyPrefix)
	}
}

func TestWriteError(t *testing.T) {
	for _, c := range []struct {
		err         error
		status      int
		code, retry string
		mustNotLeak string
	}{
		{door.Refuse(404, door.CodeAgentNotFound, "no agent %s", "x"), 404, door.CodeAgentNotFound, "", ""},
		{fmt.Errorf("get run: %w", context.DeadlineExceeded), 503, door.CodeUnavailable, "1", "get run"},
		{&pgconn.PgError{Code: "57P03", Message: "the database system is starting up"}, 503, door.CodeUnavailable, "1", "starting"},
		{errors.New("pq: secret driver detail"), 500, door.CodeInternal, "", "secret"},
	} {
		rec := httptest.NewRecorder()
		door.WriteError(rec, httptest.NewRequest("GET", "/x", nil), nil, c.err)
		body := rec.Body.String()
		if rec.Code != c.status || !strings.Contains(body, `"code":"`+c.code+`"`) || rec.Header().Get("Retry-After") != c.retry ||
			rec.Header().Get("Content-Type") != "application/json" {
			t.Errorf("%v: %d %v %s", c.err, rec.Code, rec.Header(), body)
		}
		if c.mustNotLeak != "" && strings.Contains(body, c.mustNotLeak) {
			t.Errorf("%v leaked into %s", c.err, body)
		}
	}
	_ = http.StatusOK
}

// A refused body's message names what is wrong once, in words a caller can
// act on: a repeated key used to read "the body repeats a key in one
// object: an object repeats a key: \"threadId\"".
func TestCheckBodyMessages(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{`{"threadId":"a","threadId":"b"}`, `the body repeats a key in one object: "threadId"`},
		{"{\"a\":\"\xff\"}", "the body is not valid UTF-8"},
		{`{"a":`, "the body is not valid JSON"},
	} {
		e := door.CheckBody([]byte(c.body), 64)
		if e == nil || e.Status != http.StatusBadRequest || e.Code != door.CodeMalformedJSON || e.Message != c.want {
			t.Errorf("CheckBody(%q) = %+v; want 400 %s %q", c.body, e, door.CodeMalformedJSON, c.want)
		}
	}
}
