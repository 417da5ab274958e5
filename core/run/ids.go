package run

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
)

// Identifiers funduq mints: a prefix, an underscore and 24 lowercase hex
// characters (96 random bits). A caller's own ids are never adopted.
const (
	RunPrefix     = "run_"
	ThreadPrefix  = "thread_"
	MessagePrefix = "msg_"
)

func newID(prefix string) string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand never fails on supported platforms (Go 1.24+ panics
		// itself rather than return an error); keep the contract explicit.
		panic("run: crypto/rand failed: " + err.Error())
	}
	return prefix + hex.EncodeToString(b[:])
}

// NewRunID mints a run id.
func NewRunID() string { return newID(RunPrefix) }

// NewThreadID mints a thread id.
func NewThreadID() string { return newID(ThreadPrefix) }

// NewMessageID mints a thread-message id.
func NewMessageID() string { return newID(MessagePrefix) }

// IsMintedID reports whether id has the shape funduq mints under prefix.
func IsMintedID(prefix, id string) bool {
	rest, ok := strings.CutPrefix(id, prefix)
	if !ok || len(rest) != 24 {
		return false
	}
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
