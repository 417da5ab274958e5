package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/funduq/funduq-go/core/run"
)

// maxNoticePayload keeps a queued notice under PostgreSQL's NOTIFY payload
// limit (8000 bytes) with room to spare.
const maxNoticePayload = 7900

// queuedNotice is what a queued notice carries beside the run id: what the
// broker needs to open the run's lane without reading the row back.
type queuedNotice struct {
	ThreadID    string          `json:"t"`
	ProviderKey string          `json:"p"`
	AgentName   string          `json:"a"`
	RunInput    json.RawMessage `json:"i"`
	// Addressed is NewRun.AddressedRunID; absent for an ordinary turn and
	// in a notice from a door older than the column.
	Addressed string `json:"d,omitempty"`
}

// QueuedPayload is the ChannelRunQueued payload for a new run: its id, and
// when it fits, a newline and the run's thread, agent and input as JSON.
// It is sent in the transaction that writes the row, so it says what the
// row says at commit.
func QueuedPayload(nr NewRun) string {
	b, err := json.Marshal(queuedNotice{ThreadID: nr.ThreadID, ProviderKey: nr.ProviderKey, AgentName: nr.AgentName,
		RunInput: nr.RunInput, Addressed: nr.AddressedRunID})
	if err != nil || len(nr.RunID)+1+len(b) > maxNoticePayload {
		return nr.RunID // the broker reads the row
	}
	return nr.RunID + "\n" + string(b)
}

// ParseQueuedPayload reads a ChannelRunQueued payload. It returns the run id
// and, when the payload carried it, the run as it was queued (status
// queued, no cancel requested); r is nil for a bare run id, which the
// reader looks up itself. A payload that names a run but whose rest does
// not parse returns the id with an error.
func ParseQueuedPayload(payload string) (runID string, r *Run, err error) {
	runID, rest, ok := strings.Cut(payload, "\n")
	if runID == "" || strings.ContainsAny(runID, " \t\r") {
		return "", nil, errors.New("queued notice: no run id")
	}
	if !ok {
		return runID, nil, nil
	}
	var n queuedNotice
	if err := json.Unmarshal([]byte(rest), &n); err != nil {
		return runID, nil, fmt.Errorf("queued notice for run %s: %w", runID, err)
	}
	if n.ThreadID == "" || n.ProviderKey == "" || n.AgentName == "" || len(n.RunInput) == 0 || !json.Valid(n.RunInput) {
		return runID, nil, fmt.Errorf("queued notice for run %s: thread, provider, agent and input are required", runID)
	}
	return runID, &Run{RunID: runID, ThreadID: n.ThreadID, ProviderKey: n.ProviderKey, AgentName: n.AgentName,
		Status: run.Queued, RunInput: n.RunInput, AddressedRunID: n.Addressed}, nil
}
