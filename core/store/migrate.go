package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"sort"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

func migrationsFS() fs.FS {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		panic(err) // the embed pattern above guarantees the folder
	}
	return sub
}

// MigrationsHash identifies the embedded schema: a sha256 over every
// migration file's name and bytes. Test helpers key template databases on it.
func MigrationsHash() string {
	fsys := migrationsFS()
	names, _ := fs.Glob(fsys, "*.sql")
	sort.Strings(names)
	h := sha256.New()
	for _, n := range names {
		b, _ := fs.ReadFile(fsys, n)
		h.Write([]byte(n))
		h.Write([]byte{0})
		h.Write(b)
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Migrate applies every pending migration to the database at dsn. It takes a
// PostgreSQL advisory lock for the duration, so several nodes starting at
// once migrate one after another rather than over each other. Each
// statement waits for a lock at most DefaultMigrateLockTimeout
// (MigrateWith).
func Migrate(ctx context.Context, dsn string, log *slog.Logger) error {
	return MigrateWith(ctx, dsn, MigrateOptions{Log: log})
}

// MigrateDB is Migrate over an open database/sql handle (pgx stdlib driver),
// with the handle's own session settings: no lock timeout unless its
// connections carry one (tests' fresh databases).
func MigrateDB(ctx context.Context, db *sql.DB, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return fmt.Errorf("migrate: locker: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrationsFS(), goose.WithSessionLocker(locker))
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	results, err := p.Up(ctx)
	if err != nil {
		return fmt.Errorf("migrate: apply: %w", err)
	}
	for _, r := range results {
		log.InfoContext(ctx, "migration applied", "version", r.Source.Version, "file", r.Source.Path, "took", r.Duration.String())
	}
	// A schema a newer release migrated has nothing for this binary to
	// apply, and CheckSchema refuses it: say so here rather than call it
	// current (an old image booting, a rolled-back binary).
	applied, err := p.GetDBVersion(ctx)
	if err != nil {
		return fmt.Errorf("migrate: read the applied version: %w", err)
	}
	if embedded := newestEmbedded(p); applied > embedded {
		return fmt.Errorf("migrate: %w", newerSchema(applied, embedded))
	}
	warnInvalidIndexes(ctx, log, db)
	return nil
}

// InvalidIndexes names the indexes of the database that PostgreSQL marks
// invalid and no build is working on: left by a concurrent build or drop
// that was interrupted. The planner never reads such an index, and a
// unique one may enforce nothing; migrate does not repair one a recorded
// migration left (design.md §Open questions, "A database that recorded
// 00007 with an invalid index"), so the node and migrate name them.
func InvalidIndexes(ctx context.Context, db *sql.DB) ([]string, error) {
	rows, err := db.QueryContext(ctx, `
		SELECT i.indexrelid::regclass::text FROM pg_index i
		JOIN pg_class c ON c.oid = i.indexrelid
		WHERE NOT i.indisvalid AND c.relnamespace = current_schema()::regnamespace
		  AND i.indexrelid NOT IN (SELECT index_relid FROM pg_stat_progress_create_index WHERE index_relid IS NOT NULL)
		ORDER BY 1`)
	if err != nil {
		return nil, fmt.Errorf("read invalid indexes: %w", err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, fmt.Errorf("read invalid indexes: %w", err)
		}
		names = append(names, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read invalid indexes: %w", err)
	}
	return names, nil
}

// warnInvalidIndexes logs, at ERROR, the invalid indexes InvalidIndexes
// finds and how to rebuild them; a failed read is a warning: the schema
// itself is current.
func warnInvalidIndexes(ctx context.Context, log *slog.Logger, db *sql.DB) {
	names, err := InvalidIndexes(ctx, db)
	if err != nil {
		log.WarnContext(ctx, "could not check the indexes' validity", "err", err)
		return
	}
	if len(names) > 0 {
		log.ErrorContext(ctx, "the database holds invalid indexes (left by an interrupted concurrent build): "+
			"queries do not read them and a unique one may not enforce its key; "+
			"rebuild each with REINDEX INDEX CONCURRENTLY <name> (design.md §Deployment)", "indexes", names)
	}
}

// ErrSchemaNewer: the database is at a migration past this binary's
// newest. Migrate applied nothing; a node of this binary refuses it.
var ErrSchemaNewer = errors.New("the database schema is newer than this binary")

func newestEmbedded(p *goose.Provider) int64 {
	srcs := p.ListSources()
	if len(srcs) == 0 {
		return 0
	}
	return srcs[len(srcs)-1].Version
}

// newerSchema is the refusal of a schema past this binary's newest
// migration: running migrate again cannot help, a binary of the release
// that migrated it can.
func newerSchema(applied, embedded int64) error {
	return fmt.Errorf("%w: it is at version %d, this binary's newest is %d; "+
		"run a broker-node of the release that migrated it (or a later one)", ErrSchemaNewer, applied, embedded)
}

// SchemaVersion returns the newest applied migration version and the newest
// embedded one; a node is only ready when they are equal.
func SchemaVersion(ctx context.Context, db *sql.DB) (applied, embedded int64, err error) {
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrationsFS())
	if err != nil {
		return 0, 0, fmt.Errorf("schema version: %w", err)
	}
	applied, err = p.GetDBVersion(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("schema version: %w", err)
	}
	return applied, newestEmbedded(p), nil
}

// keep the pgx database/sql driver registered for sql.Open("pgx", …).
var _ = stdlib.GetDefaultDriver

// CheckSchema fails unless the database's newest applied migration is the
// newest this binary embeds: a node refuses to start on a schema it was not
// built for, and says what to run.
func (s *Store) CheckSchema(ctx context.Context) error {
	db := stdlib.OpenDBFromPool(s.pool)
	defer db.Close()
	applied, embedded, err := SchemaVersion(ctx, db)
	if err != nil {
		return fmt.Errorf("the database has no funduq schema (run `broker-node migrate`): %w", err)
	}
	if applied > embedded {
		return newerSchema(applied, embedded)
	}
	if applied != embedded {
		return &SchemaBehindError{Applied: applied, Needed: embedded}
	}
	warnInvalidIndexes(ctx, s.log, db)
	return nil
}

// SchemaBehindError: the database lacks migrations this binary embeds
// (Applied < Needed; 0 for a database nobody migrated).
type SchemaBehindError struct{ Applied, Needed int64 }

func (e *SchemaBehindError) Error() string {
	return fmt.Sprintf("the database schema is at version %d, this binary needs %d: run `broker-node migrate`", e.Applied, e.Needed)
}

// embeddedVersion is the newest migration this binary embeds, read from
// the files' names as goose reads them.
var embeddedVersion = sync.OnceValue(func() int64 {
	names, _ := fs.Glob(migrationsFS(), "*.sql")
	var newest int64
	for _, n := range names {
		if v, err := goose.NumericComponent(n); err == nil && v > newest {
			newest = v
		}
	}
	return newest
})

// CheckSchemaReached is the doors' check (design.md §Deployment, "The
// doors need the migrated schema"): it fails with a *SchemaBehindError
// when the database lacks a migration this binary embeds, and accepts a
// newer schema, which a deploy's migration makes before the doors of its
// release replace the older ones (and a rollback's doors run over until
// the schema is stepped down). One query, and it creates nothing: unlike
// goose's own reading of the version (CheckSchema), it leaves a database
// without a version table as it found it. Any other error is the query's
// (storage unreachable, a role that may not read the table).
func (s *Store) CheckSchemaReached(ctx context.Context) error {
	var applied int64
	err := s.pool.QueryRow(ctx, `SELECT coalesce(max(version_id), 0) FROM goose_db_version`).Scan(&applied)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table: never migrated
		err, applied = nil, 0
	}
	if err != nil {
		return fmt.Errorf("read the schema version: %w", err)
	}
	if needed := embeddedVersion(); applied < needed {
		return &SchemaBehindError{Applied: applied, Needed: needed}
	}
	return nil
}
