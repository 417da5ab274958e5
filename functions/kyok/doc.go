// Package kyok is the KYOK completion door: POST /kyok/v1/chat/completions,
// an OpenAI-compatible endpoint an agent calls with its run's KYOK token as
// its API key, relayed to the caller's own LLM provider through the leading
// broker node.
//
// The door is stateless (any instance serves any call). It checks the call
// in the order and with the statuses of design.md §KYOK:
//
//  1. the token verifies and has not expired                     401 invalid_token
//  2. the run exists, is not cancel-requested, is the token's
//     agent's, and is live (queued, offering or running)         403 run_not_active
//  3. X-Souk-Kyok-Timestamp / X-Souk-Kyok-Signature present,
//     an integer, within ±60 s                                    401 invalid_signature
//     — queued too, because the run frame leaves beside the offering
//     write (design.md §The shape): an agent that calls at once can
//     be ahead of it, and only the provider that was offered the run
//     holds its token
//  4. the token's agent is registered                            403 agent_not_registered
//  5. the Ed25519 signature by the agent's provider key over
//     funduq-kyok-call:{token}:{ts}:{sha256hex(body)}             401 invalid_signature
//  6. the body is JSON in valid UTF-8, with no repeated key and
//     at most MaxJSONDepth levels (core/strictjson)               400 malformed_json
//  7. the run has a KYOK binding                                  503 no_kyok_binding
//  8. the bound offering is attached (durable roster, then the
//     relay's own answer; never queued)                           503 llm_not_attached
//  9. the body is a chat-completion request (model, messages)     400 invalid_request
//  10. the LLM link has room (config KyokMaxConcurrent)            429 llm_busy, Retry-After
//  11. the provider fails before the first chunk                   502 llm_refused / llm_failed
//     (llm_refused with X-Should-Retry: false: a refusal is the
//     provider's answer, which an OpenAI client's retry would only
//     ask for, and count, again)
//  12. no broker node takes the request up, or the one relaying
//     it goes silent (not even keep-alives) before the door has
//     committed to a status                                      503 relay_unavailable, Retry-After
//
// Every refusal is one JSON envelope {"error": {"code", "message"}}; a
// structured refusal of the LLM provider rides intact as error.refusal.
// Then the request goes to the leader over Redis (core/kyok) and the answer
// comes back as SSE (`data: <chunk, nulls dropped>` … `data: [DONE]`, or one
// final `data: {"error": …}` and no [DONE] on a mid-stream failure) when the
// body asks for stream: true, else as one collapsed chat.completion.
package kyok
