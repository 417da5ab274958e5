// Package procstack runs funduq's split deployment as operating-system
// processes on this machine, for the tools and tests that must see it the
// way production does: broker nodes (one leads through the Redis lease,
// design.md D7), local door servers and provider processes over one
// PostgreSQL database and one Redis key prefix, a stand-in load balancer in
// front of the broker nodes, and the faults made on them (SIGKILL, SIGTERM
// handover, SIGSTOP/SIGCONT, restart as a new incarnation). The scaling
// suite (broker-node/scaling), the load tool (scripts/load) and the soak
// (scripts/soak) all start their stack here. A Stack is built from a
// validated Config and owns everything it starts: each Proc's waiter, the
// Balancer's server and the connections through it; Close stops them all
// (SIGCONT to a frozen process, then SIGTERM within Config.StopGrace, then
// SIGKILL) and returns once each has exited. Nothing here sleeps as a
// barrier: readiness and leadership are observed (an HTTP answer, an exit),
// polled on a ticker and bounded by the caller's context. Every refusal is
// a typed error (*ConfigError, *ProcError, *BuildError, ErrNoLeader,
// ErrClosed) naming the process and its log.
package procstack
