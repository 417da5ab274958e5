package procstack

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"

	"github.com/jackc/pgx/v5"

	"github.com/funduq/funduq-go/core/store"
)

// DatabaseError is a database that could not be created, migrated or
// dropped.
type DatabaseError struct {
	Op   string // "create", "migrate" or "drop"
	Name string
	Err  error
}

func (e *DatabaseError) Error() string {
	return fmt.Sprintf("procstack: %s database %s: %v", e.Op, e.Name, e.Err)
}

func (e *DatabaseError) Unwrap() error { return e.Err }

var dbName = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// Database is a fresh database with funduq's schema, made for one stack
// on a server the caller reaches as a superuser; the caller drops it.
type Database struct {
	Name     string
	URL      string // the admin URL with this database's name
	adminURL string
}

// CreateDatabase creates database name (a plain lower-case identifier)
// through adminURL and applies the migrations. A database left half made
// is dropped again.
func CreateDatabase(ctx context.Context, adminURL, name string) (*Database, error) {
	d, err := CreateEmptyDatabase(ctx, adminURL, name)
	if err != nil {
		return nil, err
	}
	if err := store.Migrate(ctx, d.URL, slog.New(slog.DiscardHandler)); err != nil {
		_ = d.Drop(context.WithoutCancel(ctx))
		return nil, &DatabaseError{Op: "migrate", Name: name, Err: err}
	}
	return d, nil
}

// CreateEmptyDatabase creates database name without funduq's schema, for
// a build other than this one to migrate (scripts/load -bin).
func CreateEmptyDatabase(ctx context.Context, adminURL, name string) (*Database, error) {
	if !dbName.MatchString(name) {
		return nil, &ConfigError{Field: "database name", Problem: "want a lower-case identifier, got " + name}
	}
	u, err := url.Parse(adminURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return nil, &ConfigError{Field: "admin URL", Problem: "want a postgres:// URL"}
	}
	u.Path = "/" + name
	d := &Database{Name: name, URL: u.String(), adminURL: adminURL}
	if err := d.Admin(ctx, "CREATE DATABASE "+name); err != nil {
		return nil, &DatabaseError{Op: "create", Name: name, Err: err}
	}
	return d, nil
}

// Admin runs one statement as the superuser, on its own connection.
func (d *Database) Admin(ctx context.Context, sql string) error {
	c, err := pgx.Connect(ctx, d.adminURL)
	if err != nil {
		return err
	}
	defer c.Close(context.WithoutCancel(ctx))
	_, err = c.Exec(ctx, sql)
	return err
}

// Drop drops the database, closing the sessions still on it.
func (d *Database) Drop(ctx context.Context) error {
	if err := d.Admin(ctx, "DROP DATABASE IF EXISTS "+d.Name+" WITH (FORCE)"); err != nil {
		return &DatabaseError{Op: "drop", Name: d.Name, Err: err}
	}
	return nil
}
