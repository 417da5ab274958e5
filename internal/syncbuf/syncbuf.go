// Package syncbuf holds a byte buffer a test reads while something else
// still writes it: a child process's output (exec.Cmd copies it from its
// own goroutine until Wait, and a test that fails first reads it on the
// way out) or a logger's sink shared by goroutines.
package syncbuf

import (
	"bytes"
	"encoding/json"
	"sync"
)

// Buffer is a bytes.Buffer guarded for one writer and concurrent readers.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Bytes returns a copy of what was written so far.
func (s *Buffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.b.Bytes())
}

// Records returns the lines written so far that are JSON objects, in
// order: the records of a log/slog JSON handler writing to s.
func (s *Buffer) Records() []map[string]any {
	var out []map[string]any
	for _, l := range bytes.Split(s.Bytes(), []byte("\n")) {
		var m map[string]any
		if json.Unmarshal(l, &m) == nil && m != nil {
			out = append(out, m)
		}
	}
	return out
}

// Record returns the first of Records whose member key equals value, or
// nil if none does yet.
func (s *Buffer) Record(key string, value any) map[string]any {
	for _, m := range s.Records() {
		if m[key] == value {
			return m
		}
	}
	return nil
}
