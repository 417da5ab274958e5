package livefeed

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// MaxOutcome bounds the outcome an end marker carries, encoded: a pause
// payload or an agent's messages past it stay in PostgreSQL alone, and the
// marker says it left them out, so no stream entry grows with what a
// provider sent.
const MaxOutcome = 32 << 10

// Outcome is what the broker recorded when it ended a run's round, as the
// end marker carries it (EndWith): published after the end's commit, like
// every entry of the feed (design.md D9), it is the record's own values.
// A door that relayed every event of the round from the feed answers from
// it instead of reading the record back.
type Outcome struct {
	Status         string    `json:"status"`
	LastSeq        int       `json:"lastSeq"`
	FailureReason  string    `json:"failureReason,omitempty"`
	LastActivityAt time.Time `json:"lastActivityAt"`
	// Interrupt is the stored pause payload (input-required only).
	Interrupt json.RawMessage `json:"interrupt,omitempty"`
	// Messages are the agent's messages the end recorded on the run's
	// thread, in order, with the ids the broker minted for them.
	Messages []OutcomeMessage `json:"messages,omitempty"`
}

// OutcomeMessage is one agent message an end recorded.
type OutcomeMessage struct {
	ID      string          `json:"id"`
	Message json.RawMessage `json:"message"`
}

// MarshalOutcome encodes o for a marker; false when the encoding is over
// MaxOutcome. HTML is not escaped: the payload is carried as the record
// holds it, so an answer built from it is the one built from the record.
func MarshalOutcome(o Outcome) ([]byte, bool) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if enc.Encode(o) != nil {
		return nil, false
	}
	raw := bytes.TrimSuffix(b.Bytes(), []byte("\n"))
	return raw, len(raw) <= MaxOutcome
}

var errBadOutcome = errors.New("not an end marker's outcome")

// ParseOutcome reads a marker's outcome. Members it does not know are
// ignored (a newer broker's); one it needs that is missing or malformed is
// an error, and the reader reads the record instead.
func ParseOutcome(raw []byte) (Outcome, error) {
	var o Outcome
	if len(raw) > MaxOutcome {
		return Outcome{}, fmt.Errorf("%w: %d bytes, over %d", errBadOutcome, len(raw), MaxOutcome)
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return Outcome{}, fmt.Errorf("%w: %v", errBadOutcome, err)
	}
	switch {
	case o.Status == "":
		return Outcome{}, fmt.Errorf("%w: no status", errBadOutcome)
	case o.LastSeq < 0:
		return Outcome{}, fmt.Errorf("%w: last seq %d", errBadOutcome, o.LastSeq)
	case o.LastActivityAt.IsZero():
		return Outcome{}, fmt.Errorf("%w: no lastActivityAt", errBadOutcome)
	}
	if string(o.Interrupt) == "null" {
		o.Interrupt = nil
	}
	for i, m := range o.Messages {
		if m.ID == "" || len(m.Message) == 0 || m.Message[0] != '{' {
			return Outcome{}, fmt.Errorf("%w: message %d has no id or is not an object", errBadOutcome, i)
		}
	}
	return o, nil
}
