package wire

import "encoding/json"

// Frame types on /ws/kyok beyond those shared with /ws/provider (hello,
// welcome, register, registered, deleted, error).
const (
	TypeDeleteModel       = "deleteModel"
	TypeCompletionRequest = "completionRequest"
	TypeChunk             = "chunk"
	TypeDone              = "done"
)

// KyokInbound and KyokOutbound are the /ws/kyok frame sets after the
// handshake (design.md §The provider wire).
var (
	KyokInbound  = []string{TypeRegister, TypeDeleteModel, TypeChunk, TypeDone, TypeError}
	KyokOutbound = []string{TypeWelcome, TypeCompletionRequest, TypeRegistered, TypeDeleted, TypeError}
)

// RegisterModels is an LLM provider's register: the offerings this link
// serves (non-empty, non-empty names) and one optional metadata document.
type RegisterModels struct {
	Type     string          `json:"type"`
	Models   []string        `json:"models"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

// DeleteModel removes one offering; Deleted confirms it.
type DeleteModel struct {
	Type string `json:"type"`
	Name string `json:"name"`
}

// KyokCompletionRequest is the completionRequest frame as funduq writes it:
// DeliveredCompletion's keys with the run's actor chain carried verbatim
// (the stored chain, or null).
type KyokCompletionRequest struct {
	Type        string          `json:"type"`
	RequestID   string          `json:"requestId"`
	RunID       string          `json:"runId"`
	ProviderKey string          `json:"providerKey"`
	AgentName   string          `json:"agentName"`
	Body        json.RawMessage `json:"body"`
	LLMName     string          `json:"llmName"`
	Context     json.RawMessage `json:"context"`
	ActorChain  json.RawMessage `json:"actorChain"`
}

// Chunk is one ChatCompletionChunk of a completion's answer.
type Chunk struct {
	Type      string          `json:"type"`
	RequestID string          `json:"requestId"`
	Data      json.RawMessage `json:"data"`
}

// Done ends a completion's answer.
type Done struct {
	Type      string `json:"type"`
	RequestID string `json:"requestId"`
}

// KyokError is an error frame on /ws/kyok, either way: from the LLM
// provider, the failure of a completion (Refusal, an object, makes it a
// structured refusal relayed intact); from funduq, a complaint about a frame.
type KyokError struct {
	Type      string          `json:"type"`
	RequestID string          `json:"requestId,omitempty"`
	Message   string          `json:"message"`
	Name      string          `json:"name,omitempty"`
	Refusal   json.RawMessage `json:"refusal,omitempty"`
}
