// Package broker is the heart of the broker node: the roster of provider
// links and their capacity buckets, one lane per active run, taking queued
// runs from the shared database (the intake listener's notices and the
// catch-up), the sweep and the quality counters (design.md §The
// shape, §Counters, §Timers). Every run owns one goroutine whose only wait is its
// own command queue; everything that happens to a run — a chance to be
// offered, an answer, an event, a finish, a cancel, its provider leaving, a
// verdict of the sweep — is said into that queue, and the run decides. All of
// the broker's work runs under one leadership context and one epoch: when
// leadership ends, every lane stops and every link is closed, and the next
// leader reads the runs back from PostgreSQL.
package broker
