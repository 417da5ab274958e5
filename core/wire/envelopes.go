package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// DeliveredRun is what a provider is offered: funduq's run id, which of the
// provider's agents, the AG-UI RunAgentInput, the thread id and run metadata
// ({} — funduq's own additions live in forwardedProps.funduq).
type DeliveredRun struct {
	RunID     string          `json:"runId"`
	AgentName string          `json:"agentName"`
	RunInput  json.RawMessage `json:"runInput"`
	ThreadID  *string         `json:"threadId"`
	Metadata  json.RawMessage `json:"metadata"`
}

// RunFrame is the "run" frame: {"type":"run", …DeliveredRun}.
type RunFrame struct {
	Type string `json:"type"`
	DeliveredRun
}

// NewRunFrame wraps d as a run frame, defaulting metadata to {}.
func NewRunFrame(d DeliveredRun) RunFrame {
	if len(d.Metadata) == 0 {
		d.Metadata = json.RawMessage("{}")
	}
	return RunFrame{Type: "run", DeliveredRun: d}
}

// DeliveredCompletion is a KYOK completion request as the LLM provider sees
// it: the proven calling agent, the OpenAI request body, the bound offering,
// the caller's opaque context and the run's actor chain (or null).
type DeliveredCompletion struct {
	RunID       string          `json:"runId"`
	ProviderKey string          `json:"providerKey"`
	AgentName   string          `json:"agentName"`
	Body        json.RawMessage `json:"body"`
	LLMName     string          `json:"llmName"`
	Context     json.RawMessage `json:"context"`
	ActorChain  []string        `json:"actorChain"`
}

// CompletionRequestFrame is {"type":"completionRequest","requestId":…, …DeliveredCompletion}.
type CompletionRequestFrame struct {
	Type      string `json:"type"`
	RequestID string `json:"requestId"`
	DeliveredCompletion
}

// Marshal encodes a frame or envelope compactly without HTML escaping.
func Marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// ErrEnvelope is matched by every strict-decode failure.
var ErrEnvelope = errors.New("envelope does not validate")

// decodeStrict decodes raw into v refusing unknown keys and requiring every
// key in required to be present (null counts as present).
func decodeStrict(raw []byte, v any, required ...string) error {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(raw, &keys); err != nil {
		return fmt.Errorf("%w: %v", ErrEnvelope, err)
	}
	for _, k := range required {
		if _, ok := keys[k]; !ok {
			return fmt.Errorf("%w: missing key %q", ErrEnvelope, k)
		}
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", ErrEnvelope, err)
	}
	return nil
}

// DecodeDeliveredRun reads a DeliveredRun strictly (a run frame minus "type").
func DecodeDeliveredRun(raw []byte) (DeliveredRun, error) {
	var d DeliveredRun
	err := decodeStrict(raw, &d, "runId", "agentName", "runInput", "threadId", "metadata")
	return d, err
}

// DecodeRunFrame reads a whole "run" frame strictly: a DeliveredRun with
// its "type" (which the caller has peeked). It is DecodeDeliveredRun on the
// frame minus "type", in two passes over the bytes instead of four.
func DecodeRunFrame(raw []byte) (DeliveredRun, error) {
	var f RunFrame
	err := decodeStrict(raw, &f, "type", "runId", "agentName", "runInput", "threadId", "metadata")
	return f.DeliveredRun, err
}

// DecodeDeliveredCompletion reads a DeliveredCompletion strictly.
func DecodeDeliveredCompletion(raw []byte) (DeliveredCompletion, error) {
	var d DeliveredCompletion
	err := decodeStrict(raw, &d, "runId", "providerKey", "agentName", "body")
	return d, err
}
