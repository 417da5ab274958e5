package door

import (
	"errors"
	"net/http"
)

// LastEventIDHeader resumes a stream: its value is the SSE id (the run
// event seq) of the last event received.
const LastEventIDHeader = "Last-Event-ID"

// SSE writes a 200 text/event-stream answer. A write or flush that fails
// marks the client gone (Broken); nothing is written after.
type SSE struct {
	w         http.ResponseWriter
	rc        *http.ResponseController
	broken    bool
	unflushed bool // written since the last flush
}

// StartSSE writes the stream's headers and status.
func StartSSE(w http.ResponseWriter) *SSE {
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-cache")
	hd.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	return &SSE{w: w, rc: http.NewResponseController(w)}
}

// Broken reports that a write failed: the client is gone.
func (s *SSE) Broken() bool { return s.broken }

// Write writes text as is; it goes out at the next Flush.
func (s *SSE) Write(text string) {
	if s.broken {
		return
	}
	if _, err := s.w.Write([]byte(text)); err != nil {
		s.broken = true
		return
	}
	s.unflushed = true
}

// Comment writes an SSE comment.
func (s *SSE) Comment(text string) { s.Write(": " + text + "\n\n") }

// Flush sends what was written since the last flush.
func (s *SSE) Flush() {
	if s.broken || !s.unflushed {
		return
	}
	s.unflushed = false
	if err := s.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		s.broken = true
	}
}
