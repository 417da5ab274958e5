// Package outage holds the storage outage tests (issue #10, point 1): a
// broker node and a door on a private PostgreSQL and Redis
// (internal/testservers) that the tests stop, freeze and start again. A
// door killed mid-stream, with the client resuming from another door with
// Last-Event-ID, is broker-node/scaling's TestX9DoorDiesMidStream.
package outage
