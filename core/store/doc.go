// Package store is funduq's shared record in PostgreSQL, on pgx/v5: the
// schema and its embedded migrations, the guarded status transitions every
// writer goes through, the broker's epoch fencing, event appends and the
// door-side inserts. Doors and the broker node share this package and nothing
// else for state: a write either names the statuses it may move a run from
// (and, for the broker, the epoch it leads under) or it does not happen.
package store
