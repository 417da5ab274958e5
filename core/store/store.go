package store

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Store is the handle doors and the broker share. It owns its pool.
type Store struct {
	pool   *pgxpool.Pool
	log    *slog.Logger
	faults atomic.Pointer[Faults]
}

// Faults inject failures into the store's driver layer, for tests that
// need a PostgreSQL fault at an exact moment (a real commit whose answer
// is lost): see InjectFaults. Production code never sets them.
type Faults struct {
	// AfterCommit is called once a pipelined write's COMMIT has succeeded
	// (op names the write). A non-nil error closes the connection and is
	// returned instead of success, as when a connection drops after the
	// server committed but before its answer arrived.
	AfterCommit func(op string) error
	// Conclude, when it returns an error, refuses a Conclude before it
	// writes anything, as PostgreSQL refuses a value it cannot hold.
	Conclude func(Conclusion) error
	// Events, when it returns an error, refuses a write of provider
	// events (AppendProviderEventsOnce, or a Conclude carrying them)
	// before it writes anything, as PostgreSQL refuses a value it
	// cannot hold in one of them.
	Events func([]NewEvent) error
}

// refuseConclude is the injected refusal of Conclude c, or nil.
func (f *Faults) refuseConclude(c Conclusion) error {
	switch {
	case f == nil:
		return nil
	case f.Conclude != nil:
		if err := f.Conclude(c); err != nil {
			return err
		}
	}
	return f.refuseEvents(c.ProviderEvents)
}

// refuseEvents is the injected refusal of a write of provider events evs,
// or nil.
func (f *Faults) refuseEvents(evs []NewEvent) error {
	if f == nil || f.Events == nil || len(evs) == 0 {
		return nil
	}
	return f.Events(evs)
}

// InjectFaults sets (or, with nil, clears) the store's injected faults.
func (s *Store) InjectFaults(f *Faults) { s.faults.Store(f) }

// Options tune Open. The zero value is usable.
type Options struct {
	// MaxConns caps the pool (0 keeps pgx's default). Lambda doors want 1–2.
	MaxConns int32
	// ApplicationName names the pool's connections in pg_stat_activity,
	// so an operator (or a fault test) can tell whose backend is whose.
	ApplicationName string
	Log             *slog.Logger
}

// Open connects a pool to dsn and checks it answers.
func Open(ctx context.Context, dsn string, opt Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("open store: parse database url: %w", err)
	}
	if opt.MaxConns > 0 {
		cfg.MaxConns = opt.MaxConns
	}
	if opt.ApplicationName != "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = opt.ApplicationName
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open store: ping %s@%s: %w", cfg.ConnConfig.User, cfg.ConnConfig.Host, err)
	}
	return New(pool, opt.Log), nil
}

// New wraps an existing pool; the caller keeps ownership of it.
func New(pool *pgxpool.Pool, log *slog.Logger) *Store {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Store{pool: pool, log: log}
}

// Pool exposes the pool for packages that run their own queries (LISTEN).
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Ping reports whether the database answers.
func (s *Store) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

// Close closes the pool.
func (s *Store) Close() { s.pool.Close() }
