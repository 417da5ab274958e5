// Package functions is the home of funduq's stateless doors. Each door is a
// subpackage holding an http.Handler and a small AWS Lambda entry point:
// agui (AG-UI over HTTP + SSE), a2a (A2A JSON-RPC) and kyok (the
// OpenAI-compatible completion relay). A door validates, authorizes, writes
// the thread, run and message rows and NOTIFYs in one transaction, then
// serves the caller from shared storage; it holds no run state.
package functions
