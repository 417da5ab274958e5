package door_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/redistest"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/store/storetest"
	"github.com/funduq/funduq-go/functions/door"
	"github.com/funduq/funduq-go/internal/testservers"
)

func gateOn(t *testing.T, databaseURL string) (*door.SchemaGate, http.Handler) {
	t.Helper()
	deps, err := door.Connect(config.Door{
		Storage:  config.Storage{DatabaseURL: databaseURL, RedisURL: redistest.URL()},
		Identity: config.Identity{IdentityKey: nodetest.SeedHex(0xb6), TokenSecret: nodetest.TokenSecret},
	}, door.ConnectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(deps.Close)
	g := door.NewSchemaGate(deps.Store, nil)
	return g, g.Guard(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "served") }))
}

func ask(h http.Handler) (int, string, string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/agents", nil))
	var e struct{ Error struct{ Code string } }
	_ = json.Unmarshal(rec.Body.Bytes(), &e)
	return rec.Code, e.Error.Code, rec.Body.String()
}

// A door that found the schema behind answers schema_not_migrated without
// reading the version again until SchemaRecheck has passed, then serves
// once the operator has migrated: no restart needed.
func TestSchemaGateServesOnceMigrated(t *testing.T) {
	u := storetest.EmptyURL(t)
	_, h := gateOn(t, u)
	defer func(d time.Duration) { door.SchemaRecheck = d }(door.SchemaRecheck)
	door.SchemaRecheck = time.Hour
	if code, c, b := ask(h); code != 503 || c != door.CodeSchemaNotMigrated {
		t.Fatalf("unmigrated: %d %s", code, b)
	}
	if err := store.Migrate(context.Background(), u, nil); err != nil {
		t.Fatal(err)
	}
	if code, c, b := ask(h); code != 503 || c != door.CodeSchemaNotMigrated {
		t.Fatalf("migrated within SchemaRecheck: %d %s; want the refusal kept, not the version read again", code, b)
	}
	door.SchemaRecheck = 0
	if code, _, b := ask(h); code != 200 || b != "served" {
		t.Fatalf("migrated after SchemaRecheck: %d %s; want served", code, b)
	}
}

// A newer schema than this binary's is served: a deploy migrates before
// the doors of its release replace the older ones.
func TestSchemaGateServesANewerSchema(t *testing.T) {
	u := storetest.URL(t)
	db, err := store.Open(context.Background(), u, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Pool().Exec(context.Background(), `INSERT INTO goose_db_version (version_id, is_applied)
		SELECT max(version_id) + 1, true FROM goose_db_version`); err != nil {
		t.Fatal(err)
	}
	_, h := gateOn(t, u)
	if code, _, b := ask(h); code != 200 || b != "served" {
		t.Fatalf("a schema one migration newer: %d %s; want served", code, b)
	}
}

// PostgreSQL unreachable when the door first reads the version is storage
// trouble, answered 503 storage_unavailable, not a refusal for good: once
// PostgreSQL answers, the door reads the version and serves.
func TestSchemaGateReadsAgainAfterAnOutage(t *testing.T) {
	target, err := url.Parse(storetest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	port, err := testservers.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	down := *target
	down.Host = addr
	g, h := gateOn(t, down.String())
	if err := g.Check(context.Background()); err == nil || !door.Unavailable(err) {
		t.Fatalf("check with PostgreSQL down: %v; want storage trouble", err)
	}
	if code, c, b := ask(h); code != 503 || c != door.CodeUnavailable {
		t.Fatalf("PostgreSQL down: %d %s; want 503 %s", code, b, door.CodeUnavailable)
	}
	forward(t, addr, target.Host)
	if code, _, b := ask(h); code != 200 || b != "served" {
		t.Fatalf("PostgreSQL back: %d %s; want served", code, b)
	}
}

// forward listens on addr and pipes each connection to target until the
// test ends.
func forward(t *testing.T, addr, target string) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, u)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(u, c); u.Close() })
			wg.Go(func() { _, _ = io.Copy(c, u); c.Close() })
		}
	})
}
