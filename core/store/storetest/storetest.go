// Package storetest gives tests a real, freshly migrated PostgreSQL database
// of their own. It is for tests only: it reads the test environment
// (FUNDUQ_TEST_DATABASE_URL) and, when no server answers, skips — or fails
// when CI=true, because a skipped storage test is not a passing one.
//
// Each call clones a template database that is migrated once per schema
// version (pgtestdb), so a test costs a CREATE DATABASE, not a migration, and
// the database is dropped when the test passes.
package storetest

import (
	"context"
	"database/sql"
	"net/url"
	"os"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx" for pgtestdb
	"github.com/peterldowns/pgtestdb"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/store"
)

// DefaultURL is used when FUNDUQ_TEST_DATABASE_URL is unset: the machine's
// own PostgreSQL with trust auth.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// AdminURL is the server tests create their databases on.
func AdminURL() string {
	if u := os.Getenv("FUNDUQ_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultURL
}

type migrator struct {
	key  string // names the rest of the template beside the schema ("" none)
	then func(context.Context, *sql.DB) error
}

func (m migrator) Hash() (string, error) {
	if m.key == "" {
		return store.MigrationsHash(), nil
	}
	return store.MigrationsHash() + "-" + m.key, nil
}

func (m migrator) Migrate(ctx context.Context, db *sql.DB, _ pgtestdb.Config) error {
	if err := store.MigrateDB(ctx, db, nil); err != nil {
		return err
	}
	if m.then != nil {
		return m.then(ctx, db)
	}
	return nil
}

var reach struct {
	once sync.Once
	err  error
}

// Unavailable skips (or, under CI=true, fails) the test with why.
func Unavailable(t testing.TB, what string, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is required under CI=true and is not reachable: %v", what, err)
	}
	t.Skipf("%s not reachable (%v): run the tests with scripts/test, which starts it", what, err)
}

func config(t testing.TB) pgtestdb.Config {
	t.Helper()
	u, err := url.Parse(AdminURL())
	if err != nil {
		t.Fatalf("FUNDUQ_TEST_DATABASE_URL: %v", err)
	}
	pw, _ := u.User.Password()
	port := u.Port()
	if port == "" {
		port = "5432"
	}
	q := u.Query()
	if q.Get("sslmode") == "" {
		q.Set("sslmode", "disable")
	}
	db := u.Path
	if len(db) > 0 && db[0] == '/' {
		db = db[1:]
	}
	if db == "" {
		db = "postgres"
	}
	return pgtestdb.Config{
		DriverName:                "pgx",
		Host:                      u.Hostname(),
		Port:                      port,
		User:                      u.User.Username(),
		Password:                  pw,
		Database:                  db,
		Options:                   q.Encode(),
		ForceTerminateConnections: true,
	}
}

// URL returns the connection URL of a new migrated database for this test.
func URL(t testing.TB) string {
	t.Helper()
	return url1(t, migrator{})
}

// URLWith is URL on a database that then ran fill after the migrations
// (seeding history, say). The template holding the result is built once
// per schema and key, and kept, so key must change whenever fill does.
func URLWith(t testing.TB, key string, fill func(context.Context, *sql.DB) error) string {
	t.Helper()
	return url1(t, migrator{key: key, then: fill})
}

// EmptyURL returns the connection URL of a new database of this test's
// own without funduq's schema (what a node or a command meets on a wrong
// FUNDUQ_DATABASE_URL, or on one never migrated).
func EmptyURL(t testing.TB) string {
	t.Helper()
	u := URL(t)
	db, err := sql.Open("pgx", u)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`DROP SCHEMA public CASCADE; CREATE SCHEMA public`); err != nil {
		t.Fatal(err)
	}
	return u
}

func url1(t testing.TB, m migrator) string {
	t.Helper()
	conf := config(t)
	reach.once.Do(func() {
		db, err := conf.Connect()
		if err == nil {
			err = db.Ping()
			db.Close()
		}
		reach.err = err
	})
	if reach.err != nil {
		Unavailable(t, "PostgreSQL at "+conf.Host+":"+conf.Port, reach.err)
	}
	return pgtestdb.Custom(t, conf, m).URL()
}

// Pool opens a pgx pool on a new migrated database, closed when the test ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), URL(t))
	if err != nil {
		t.Fatalf("open test pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Store opens a store on a new migrated database.
func Store(t testing.TB) *store.Store {
	t.Helper()
	return store.New(Pool(t), nil)
}

// Agent records a provider (with its key's fingerprint) and one agent of
// it, as a test's starting state. It writes the rows
// directly, unfenced and never served: the broker's own path is
// Store.RegisterAgents, under its epoch.
func Agent(t testing.TB, st *store.Store, providerKey, name string) {
	t.Helper()
	ctx := context.Background()
	pub, err := identity.ParsePublicKey(providerKey)
	if err != nil {
		t.Fatalf("record provider %s: %v", providerKey, err)
	}
	if _, err := st.Pool().Exec(ctx, `INSERT INTO providers (public_key, fingerprint) VALUES ($1, $2)
		ON CONFLICT (public_key) DO NOTHING`, providerKey, identity.Fingerprint(pub)); err != nil {
		t.Fatalf("record provider %s: %v", providerKey, err)
	}
	if _, err := st.Pool().Exec(ctx, `INSERT INTO agents (provider_key, name) VALUES ($1, $2)
		ON CONFLICT (provider_key, name) DO NOTHING`, providerKey, name); err != nil {
		t.Fatalf("record agent %s/%s: %v", providerKey, name, err)
	}
}
