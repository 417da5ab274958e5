// Package provider is funduq's Go provider SDK: it lets a program holding an
// Ed25519 identity serve agents through a funduq broker node over the provider
// link (wire v4). A Client fetches a single-use ticket with POST /tickets,
// checks funduq's key against an optional pin before signing anything, opens
// WS /ws/provider with a signed hello, verifies funduq's welcome answer,
// registers its agents and then answers every run offer at once from its own
// state — accepted, declined when full, refused (with a reason) when the
// frame does not validate or the agent is not one it serves — before running the agent's
// Handler, whose events are relayed in order with a per-run seq and closed by a
// finish. A cancel from funduq is a request: it cancels the handler's context,
// and the run still ends with finish. When Run's context ends the client
// first takes its agents out of service on the link (a deleteAgent each,
// answered before it goes on), so funduq offers it nothing more and it
// declines nothing, then drains: handlers are cancelled and their last frames
// written before the link closes (a run whose handler has not returned
// within the 5 s drain is ended by the client with a RUN_ERROR naming the
// shutdown, so funduq does not count the key abandoned). The client reconnects with exponential
// backoff and jitter after any failure, re-registers, and keeps its handlers
// running through a lost link. Once the next link is registered it resends
// only what funduq may not have: every run it still holds, and every run it
// finished whose finish funduq has not confirmed — each run's frames, those
// it wrote to the lost link (which may never have been stored) and then
// those it could not deliver, with their original seq; funduq stores each
// seq once. A finish is confirmed by two sync queries answered after it on
// the link it was written to, the second a second after the first (a
// leader that took the finish and died before storing it never answers
// that one), or by an error frame naming the run. A run whose round ended
// paused (an interrupt outcome, or a tool call left unanswered) is the exception, finished or still held
// (its finish not written, or its handler not returned after the
// RUN_FINISHED): funduq pauses a run on a lost link's stored RUN_FINISHED
// and may have reopened it since, and on a registered link its stale round
// could be taken for the answer's, so its round is resent on the next link
// before register instead, never after. There funduq takes it only for a
// run it still holds for the lost link (the round pauses the run, nothing
// counted against the key); a run it reopened or already paused refuses it
// ("unknown run"), which the client takes quietly, and what the old round
// would still send (its finish) is not sent. Finished runs are kept
// for Config.Retention either way: a run offered again after it finished is
// accepted and answered from its frames, not handled twice. One exception
// to reconnecting: told that a newer process of the same key registered
// every agent it serves (a rolling deploy), the client registers nothing
// again; it finishes the runs it holds over that link, which funduq leaves
// open (or, should it close, on links that register nothing), closes it
// and Run returns ErrReplaced once none is left. Told that a newer
// process took some of its agents only (it goes on serving the rest), the
// client leaves those out of every later register, reconnects included,
// so it never takes them back from the newer process, and registers them
// again on its link when funduq says no link of the key serves them any
// more (the newer process left, or dropped or deleted them); a new Run
// starts with the whole roster. Another: a register
// funduq refuses for good (its error's code register_refused) — past one
// of its register limits, settings of the broker the client cannot know
// before it asks (FUNDUQ_MAX_AGENTS_PER_REGISTER,
// FUNDUQ_MAX_AGENT_DESCRIPTION_BYTES, FUNDUQ_MAX_AGENT_CARD_BYTES,
// FUNDUQ_MAX_REGISTER_BYTES, FUNDUQ_MAX_FRAME_BYTES), or from a key whose
// fingerprint another key holds (use another key) — would be refused
// again however often it is sent. The client registers nothing more,
// finishes and reports the runs it holds from an earlier link (as a
// replaced client does), and Run returns an error wrapping
// ErrRegisterRefused that quotes funduq's reason, e.g.
//
//	provider: funduq refused register for good: agents[0].description is 20000 bytes, over the limit of 16384 (FUNDUQ_MAX_AGENT_DESCRIPTION_BYTES)
//
// Shrink the agent, or have the operator raise the setting, and start
// again. What New can check itself (an agent name, a duplicate, a card
// that is not a JSON object, a ProviderName over MaxProviderNameBytes) it
// refuses before anything is sent. Any other refusal of a register (code
// retry_later: the served-agents cap, FUNDUQ_MAX_SERVED_AGENTS, which
// frees as others leave) is retried with backoff as before. From a broker
// that sends no code, a refusal naming one of those settings is taken for
// good and any other is retried.
//
// A handler asks its caller a question by pausing the run: it emits a
// RUN_FINISHED whose outcome is an interrupt,
//
//	{"type":"RUN_FINISHED","threadId":…,"runId":…,
//	 "outcome":{"type":"interrupt","interrupts":[{"id":"q1","reason":"confirm","message":"Proceed?"}]}}
//
// and returns nil. funduq marks the run input-required (A2A) and relays the
// interrupts. The caller's answer reopens the same run: the Handler is called
// again with the same Run.ID, an Input whose parentRunId is that id, and the
// answer — an AG-UI caller's "resume" array ({"interruptId":"q1",
// "status":"resolved","payload":…}, with the messages the caller sent, often
// none, so LastUserText may be ""), or an A2A caller's message as the last
// user message. Each round starts with RUN_STARTED and ends like any run.
package provider
