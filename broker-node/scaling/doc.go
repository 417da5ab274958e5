// Package scaling is the scaling acceptance suite of the split deployment
// (issue 4, item 6; design.md D7, D10, D11). It holds no
// product code: its tests build the real binaries (broker-node and the
// local doors server), run two or three broker nodes and two door servers
// as OS processes on loopback (internal/procstack) over one PostgreSQL
// and one Redis, attach providers (our Go SDK, and a scripted one
// speaking the real wire), and
// make faults with SIGKILL, SIGSTOP/SIGCONT, SIGTERM and
// pg_terminate_backend.
//
// There is one named check per scenario: TestS1CrossNodeDispatch …
// TestS8ReattachedProviderCarriesOn and TestX1LeaseExpiresDuringOffer …
// TestX10PlannedHandover, and TestChaos, the seeded failover chaos test
// (issue 21; scripts/chaos runs it for more seeds). Every check places its
// calls on the wrong instance on purpose, derives its bounds from the configured lease TTL,
// provider grace and timeouts, and logs what it observed next to the bound
// it used. A check that cannot pass yet stays in the suite wrapped in xfail
// with its reason; it is never deleted.
//
// The suite is skipped under -short. Run it alone with
//
//	go test -count=1 -v ./broker-node/scaling/
package scaling
