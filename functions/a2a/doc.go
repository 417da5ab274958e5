// Package a2a is the A2A door: JSON-RPC 2.0 over the same core as the
// AG-UI door. An agent becomes A2A-callable without its author writing any
// A2A: an A2A message becomes the RunAgentInput an AG-UI caller would have
// produced (core/runinput, the one builder), and a run's status becomes the
// task's state through one table (StateMapping). The task id is the run id;
// the context id is the thread id.
//
// Routes:
//
//	POST /a2a/{provider}/{name}        JSON-RPC 2.0 (also at …/rpc); the
//	                                   streaming methods answer
//	                                   text/event-stream of JSON-RPC responses
//	GET  /a2a/{provider}/{name}/.well-known/agent-card.json
//
// {provider} is the provider's 64-hex key or 16-hex fingerprint; an unknown
// agent is HTTP 404 before any JSON-RPC processing. The protocol version is
// the A2A-Version header: absent or 0.x = 0.3 (message/send, message/stream,
// tasks/get, tasks/cancel, tasks/resubscribe), 1.x = 1.0 (SendMessage,
// SendStreamingMessage, GetTask, CancelTask, SubscribeToTask, ListTasks).
// Method names and error codes live in Methods and ErrorCodes.
package a2a
