// Package agui is the AG-UI door: POST /agui/{provider}/{name} starts a run
// (or answers a paused one) and streams its events as SSE; GET
// /threads/{threadId} is a thread snapshot; GET /runs/{runId}/events streams
// any run, resumable with Last-Event-ID, from any door instance; GET /agents
// lists the registered agents. The door holds no run state: it writes the
// thread, run and message rows and NOTIFYs in one transaction, then serves
// the caller from PostgreSQL (the backlog) and the Redis live feed (the tail).
//
// Routes:
//
//	POST /agui/{provider}/{name}   RunAgentInput → 200 text/event-stream, or a
//	                               ThreadSnapshot (200 JSON) for an answer with
//	                               nothing to land on, or the error envelope
//	GET  /threads/{threadId}       the thread snapshot: its newest messages
//	                               within a bound, ?before= for older ones
//	                               and ?limit= for fewer
//	GET  /runs/{runId}/events      the run's events (SSE id = seq), resumable
//	                               with Last-Event-ID (or ?after=)
//	GET  /agents                   registered agents with online
//
// Every refusal is {"error":{"code":…,"message":…}} (package door).
package agui
