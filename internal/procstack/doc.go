// Package procstack runs funduq's split deployment as operating-system
// processes on this machine, for the tools and tests that must see it the
// way production does: broker nodes (one leads through the Redis lease,
// fenced in PostgreSQL; design.md D10), local door servers and provider
// processes over one PostgreSQL database and one Redis key prefix, a
// stand-in load balancer in front of the broker nodes, SDK providers run in
// this process beside them, and the faults a failover test makes (SIGKILL,
// SIGTERM handover, SIGSTOP/SIGCONT, restart as the next incarnation;
// design.md D7). The scaling suite (broker-node/scaling), the load tool
// (scripts/load) and the soak (scripts/soak) all start their stack here.
// A Stack is built from a validated Config and owns everything it starts:
// each Proc's waiter goroutine, each Balancer's server and the links
// through it, each SDK provider's Run goroutine. Close stops them all —
// processes with SIGTERM within Config.StopGrace (a frozen one thawed
// first) or at once with SIGKILL — and returns once each has ended.
// Nothing here sleeps as a barrier: readiness and leadership are observed
// (an HTTP answer, an exit), polled on a ticker and bounded by the
// caller's context. Every refusal is typed (*ConfigError, *ProcError,
// *BuildError, ErrNoLeader, ErrClosed, ErrExited, ErrRunning) and names
// the process and its log.
package procstack
