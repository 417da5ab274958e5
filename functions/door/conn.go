package door

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/livefeed"
	"github.com/funduq/funduq-go/core/store"
)

// RedisPrefix namespaces funduq's Redis keys. It must equal the broker
// node's KeyPrefix (broker-node/node), which publishes the live feed the
// doors read; a test pins the two together.
const RedisPrefix = "funduq:"

// ConnectTimeout bounds a new PostgreSQL connection, so a door with its
// database unreachable answers 503 within a second or two (D13).
const ConnectTimeout = 1500 * time.Millisecond

// Deps are the shared connections and identity a door runs on.
type Deps struct {
	Store       *store.Store
	Redis       *redis.Client
	Feed        *livefeed.Feed
	Funduq      *identity.Signer
	TokenSecret []byte
	Log         *slog.Logger
	// Prefix is the Redis key prefix (FUNDUQ_REDIS_PREFIX) the doors and
	// the broker node share.
	Prefix string
	// Limits bound what one request may carry (config.DoorLimits).
	Limits config.DoorLimits
	// Schema, when set, holds the doors' requests until the database
	// carries the schema they need (SchemaGate.Guard); Connect leaves it
	// nil.
	Schema *SchemaGate
}

// ConnectOptions tune Connect.
type ConnectOptions struct {
	MaxConns    int32  // PostgreSQL pool size (0: pgx's default); Lambda wants 2
	RedisPrefix string // "" means RedisPrefix
	Log         *slog.Logger
}

// Connect opens a door's connections from its configuration. Nothing is
// dialled yet: a door whose storage is down still starts, and answers 503
// with Retry-After until storage is back.
func Connect(cfg config.Door, o ConnectOptions) (*Deps, error) {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	signer, err := identity.NewSignerFromSeedHex(cfg.IdentityKey)
	if err != nil {
		return nil, fmt.Errorf("FUNDUQ_IDENTITY_KEY: %w", err)
	}
	pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("FUNDUQ_DATABASE_URL: %w", err)
	}
	if pcfg.ConnConfig.ConnectTimeout == 0 || pcfg.ConnConfig.ConnectTimeout > ConnectTimeout {
		pcfg.ConnConfig.ConnectTimeout = ConnectTimeout
	}
	if o.MaxConns > 0 {
		pcfg.MaxConns = o.MaxConns
	}
	pcfg.ConnConfig.RuntimeParams["application_name"] = "funduq-door"
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	ropt, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("FUNDUQ_REDIS_URL: %w", err)
	}
	if ropt.DialTimeout == 0 || ropt.DialTimeout > ConnectTimeout {
		ropt.DialTimeout = ConnectTimeout
	}
	// Contexts bound every Redis call (go-redis ignores their deadlines
	// otherwise), so a hung Redis costs a door its own bound, not go-redis's.
	ropt.ContextTimeoutEnabled = true
	rdb := redis.NewClient(ropt)
	prefix := o.RedisPrefix
	if prefix == "" {
		prefix = cfg.RedisPrefix
	}
	if prefix == "" {
		prefix = RedisPrefix
	}
	return &Deps{
		Prefix:      prefix,
		Store:       store.New(pool, log),
		Redis:       rdb,
		Feed:        livefeed.New(rdb, prefix),
		Funduq:      signer,
		TokenSecret: []byte(cfg.TokenSecret),
		Log:         log,
		Limits:      Limits(cfg.DoorLimits),
	}, nil
}

// Close releases the connections.
func (d *Deps) Close() {
	if d.Redis != nil {
		_ = d.Redis.Close()
	}
	if d.Store != nil {
		d.Store.Close()
	}
}
