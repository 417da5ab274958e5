package main

import (
	"bytes"
	"net/url"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/store/storetest"
)

// Every command that cannot connect to PostgreSQL names the setting to
// check: "open store: ping postgres@127.0.0.1: failed to connect to …:
// connection refused" named the server but not FUNDUQ_DATABASE_URL, which
// a newcomer with the settings in a file elsewhere has to guess.
func TestCommandsNameAnUnreachableDatabase(t *testing.T) {
	env := emptyLeaseEnv(t)
	env["FUNDUQ_DATABASE_URL"] = "postgres://postgres@" + closedAddr(t) + "/funduq?sslmode=disable"
	env["FUNDUQ_IDENTITY_KEY"] = nodetest.SeedHex(0xbb)
	env["FUNDUQ_TOKEN_SECRET"] = nodetest.TokenSecret
	env["FUNDUQ_HTTP_ADDR"] = "127.0.0.1:0"
	for _, args := range [][]string{{"serve"}, {"migrate"}, {"lease", "status"}, {"prune", "--older-than", "720h", "--dry-run"}} {
		var out, errb bytes.Buffer
		code := run(args, env, &out, &errb)
		if code != 1 || !strings.Contains(errb.String(), "connection refused") || !strings.Contains(errb.String(), "FUNDUQ_DATABASE_URL") {
			t.Errorf("%v: exit %d, stderr %q; want exit 1 naming FUNDUQ_DATABASE_URL and the refusal", args, code, errb.String())
		}
	}
	// A server that answers but has no such database: the remedy is to
	// create it (README), not to look for a server that is down.
	u, err := url.Parse(storetest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/funduq_no_such_database"
	env["FUNDUQ_DATABASE_URL"] = u.String()
	for _, args := range [][]string{{"migrate"}, {"lease", "status"}} {
		var out, errb bytes.Buffer
		code := run(args, env, &out, &errb)
		if code != 1 || !strings.Contains(errb.String(), "FUNDUQ_DATABASE_URL: create that database first") {
			t.Errorf("%v: exit %d, stderr %q; want exit 1 saying to create the database", args, code, errb.String())
		}
	}
}
