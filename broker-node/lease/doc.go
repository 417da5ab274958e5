// Package lease is the broker's leader election on Redis (D10): a lease key
// taken with SET NX PX and a random token, renewed and released by
// compare-and-set in Lua, and an Elector that runs a callback under a
// context cancelled the moment leadership ends — when a renewal finds the
// lease gone, when renewals have failed for long enough that the lease could
// expire (self-fencing on the monotonic clock, with a margin, so the leader
// steps down before any other node can acquire), when an operator asks for a
// handover, or when the process stops. The lease decides who should lead;
// the epoch in PostgreSQL decides whose writes land.
package lease
