package main

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/funduq/funduq-go/core/redistest"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/store/storetest"
)

// doorsEnv is the local server's environment over databaseURL.
func doorsEnv(databaseURL string) []string {
	return []string{
		"FUNDUQ_DATABASE_URL=" + databaseURL, "FUNDUQ_REDIS_URL=" + redistest.URL(),
		"FUNDUQ_IDENTITY_KEY=" + strings.Repeat("11", 32), "FUNDUQ_TOKEN_SECRET=" + strings.Repeat("s", 32),
		"FUNDUQ_DOORS_ADDR=127.0.0.1:0", "FUNDUQ_LOG_LEVEL=error",
	}
}

// Over a database nobody migrated the local server refuses to start, as a
// broker node does, naming the versions and what to run. (On main it
// served, and every request was an unexplained 500 internal: relation
// "agents" does not exist.)
func TestLocalDoorsRefuseAnUnmigratedDatabase(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var errb strings.Builder
	var mu sync.Mutex
	served := false
	code := run(ctx, doorsEnv(storetest.EmptyURL(t)), syncWriter{&mu, &errb}, func(string) {
		mu.Lock()
		served = true
		mu.Unlock()
		cancel()
	})
	mu.Lock()
	defer mu.Unlock()
	say := errb.String()
	if served || code == 0 || !strings.HasPrefix(say, "doors: ") ||
		!strings.Contains(say, "the database schema is at version 0, this binary needs") || !strings.Contains(say, "run `broker-node migrate`") {
		t.Fatalf("over an unmigrated database: served %v, exit %d, stderr %q; want a refusal to start naming the versions and `broker-node migrate`",
			served, code, say)
	}
}

// A configuration error names the program, as the broker node's do
// ("broker-node: configuration: …").
func TestLocalDoorsConfigErrorNamesTheProgram(t *testing.T) {
	var out strings.Builder
	code := run(context.Background(), []string{"FUNDUQ_REDIS_URL=redis://x"}, &out, nil)
	if code != 2 || !strings.HasPrefix(out.String(), "doors: configuration: ") {
		t.Fatalf("exit %d, stderr %q; want 2 and \"doors: configuration: …\"", code, out.String())
	}
}

type syncWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// Over a schema newer than its own the local server serves: a deploy
// migrates before the doors of its release replace the older ones.
func TestLocalDoorsServeANewerSchema(t *testing.T) {
	u := storetest.URL(t)
	st, err := store.Open(context.Background(), u, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Pool().Exec(context.Background(), `INSERT INTO goose_db_version (version_id, is_applied)
		SELECT max(version_id) + 1, true FROM goose_db_version`); err != nil {
		t.Fatal(err)
	}
	base, _ := serveDoors(t, doorsEnv(u), io.Discard)
	if c, b := call(t, "GET", base+"/agents", ""); c != 200 {
		t.Fatalf("agents over a newer schema: %d %s", c, b)
	}
}
