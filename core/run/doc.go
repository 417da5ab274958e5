// Package run holds what a run is, independent of where it is stored: its
// statuses and the one table of legal transitions between them, the failure
// reasons funduq records, and the identifiers funduq mints for runs, threads
// and messages. Doors and the broker both decide "may this run move from here
// to there" by asking this package, so the status machine exists exactly once.
package run
