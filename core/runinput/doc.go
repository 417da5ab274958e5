// Package runinput is the one builder of the AG-UI RunAgentInput a provider is
// offered (design.md D4). Both doors call it, so a run's identity props are
// byte-identical whichever protocol started it: funduq's thread and run ids,
// the run's own messages with funduq-minted ids, every RunAgentInput key
// emitted (nulls included, because a strict provider refuses a run with a key
// missing), and funduq's additions under forwardedProps.funduq — the verified
// caller summary, the actor chain with funduq's signed dispatch hop, and the
// KYOK grant — with any caller key named "funduq" stripped.
package runinput
