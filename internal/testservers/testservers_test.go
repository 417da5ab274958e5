package testservers_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/internal/leaktest"
	"github.com/funduq/funduq-go/internal/testservers"
)

func TestMain(m *testing.M) { leaktest.Main(m) }

// The private servers really go away on Stop (connections are refused)
// and come back on Start on the same port with their data (PostgreSQL) or
// empty (Redis).
func TestStopStart(t *testing.T) {
	pg := testservers.PG(t)
	url := testservers.DB(t, pg)
	rs := testservers.RedisServer(t)
	ctx := context.Background()

	query := func() error {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			return err
		}
		defer c.Close(ctx)
		var n int
		return c.QueryRow(ctx, `SELECT count(*) FROM runs`).Scan(&n)
	}
	if err := query(); err != nil {
		t.Fatalf("query before the outage: %v", err)
	}
	if err := pg.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := query(); err == nil {
		t.Fatal("a query succeeded while PostgreSQL was stopped")
	}
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	if err := query(); err != nil {
		t.Fatalf("query after the restart (the schema should have survived): %v", err)
	}

	opt, _ := redis.ParseURL(rs.URL())
	opt.MaxRetries = -1
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rs.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Ping(ctx).Err(); err == nil {
		t.Fatal("PING answered while Redis was stopped")
	}
	if err := rs.Start(); err != nil {
		t.Fatal(err)
	}
	if v, err := rdb.Get(ctx, "k").Result(); err != redis.Nil {
		t.Fatalf("a restarted Redis kept k=%q (%v); it should start empty", v, err)
	}
}

// A frozen PostgreSQL accepts a connection but never answers it: a
// client's own connect timeout is what ends the wait.
func TestFreeze(t *testing.T) {
	pg := testservers.PG(t)
	if err := pg.Freeze(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if c, err := pgx.Connect(ctx, pg.URL("")); err == nil {
		c.Close(context.Background())
		t.Fatal("connected to a frozen server")
	}
	pg.Thaw()
	c, err := pgx.Connect(context.Background(), pg.URL(""))
	if err != nil {
		t.Fatalf("after thaw: %v", err)
	}
	c.Close(context.Background())
}
