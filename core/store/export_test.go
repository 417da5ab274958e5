package store

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/pressly/goose/v3"
)

// MigrateDownTo takes db's schema back to version with the migrations'
// own Down sections, for the tests of a migration run on rows an older
// release wrote: a test names the version it starts from, and migrations
// added later are undone with it without the test listing them.
func MigrateDownTo(ctx context.Context, db *sql.DB, version int64) error {
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrationsFS())
	if err != nil {
		return fmt.Errorf("migrate down: %w", err)
	}
	if _, err := p.DownTo(ctx, version); err != nil {
		return fmt.Errorf("migrate down to %d: %w", version, err)
	}
	return nil
}

// PruneLockKey is PruneBatch's advisory lock, for a test to hold as a
// pruner stuck in its batch would.
const PruneLockKey = pruneLockKey

// SetPruneLockWait shortens how long PruneBatch waits for another
// pruner's batch; the returned func puts it back.
func SetPruneLockWait(d time.Duration) (restore func()) {
	old := pruneLockWait
	pruneLockWait = d
	return func() { pruneLockWait = old }
}

// MigrateUpTo takes db's schema up to version (0: only goose's version
// table), for tests that compare a schema stepped down with one migrated
// up to the same version.
func MigrateUpTo(ctx context.Context, db *sql.DB, version int64) error {
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrationsFS())
	if err != nil {
		return fmt.Errorf("migrate up: %w", err)
	}
	if version == 0 {
		_, err = p.GetDBVersion(ctx)
	} else {
		_, err = p.UpTo(ctx, version)
	}
	if err != nil {
		return fmt.Errorf("migrate up to %d: %w", version, err)
	}
	return nil
}
