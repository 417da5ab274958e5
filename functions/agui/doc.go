// Package agui is the AG-UI door: POST /agui/{provider}/{name} starts or
// resumes a run and streams its events as SSE; GET /threads/{id} and
// GET /runs/{id}/events read from shared storage. The handler arrives with
// the AG-UI door issue; until then this package holds only this description.
package agui
