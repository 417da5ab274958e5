package kyok

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"time"

	"github.com/openai/openai-go/v3"
)

// The door↔leader path (the door is stateless, any instance; the leader
// owns every /ws/kyok link):
//
//	door:   XADD {prefix}kyok:requests  requestId=<id> request=<Request JSON>
//	leader: XREAD BLOCK from its last id, XDEL what it read (the door
//	        deletes its entry too when the call is over); finds the link serving the offering
//	        now; writes completionRequest to it and XADDs Replies to
//	        Request.ReplyKey (with a short TTL): accepted | unavailable, then
//	        chunk*, then done | error.
//	door:   XREAD BLOCK on ReplyKey from 0 and relays.

// RequestStream is the Redis stream doors add completion requests to.
func RequestStream(prefix string) string { return prefix + "kyok:requests" }

// ReplyStream is the Redis stream a request's answer is written to.
func ReplyStream(prefix, requestID string) string { return prefix + "kyok:reply:" + requestID }

// GoneKey is where a door marks that the calling agent went away before
// the completion's answer ended (for GoneTTL): the relay counts such a
// completion as nothing (broker.md §9.6, design.md §Counters).
func GoneKey(prefix, requestID string) string { return prefix + "kyok:gone:" + requestID }

// GoneTTL is how long a GoneKey lives: past the relay's gap timeout, so a
// completion still held when its caller left is never counted.
const GoneTTL = 10 * time.Minute

// Redis field names.
// KeepAliveEvery is how often the relay says it still holds an in-flight
// completion; KeepAliveSilence is how long a door waits without hearing
// anything before it fails the call as lost (a leader died mid-completion).
const (
	KeepAliveEvery   = time.Second
	KeepAliveSilence = 3 * time.Second
)

const (
	FieldRequestID = "requestId"
	FieldRequest   = "request"
	FieldReply     = "reply"
)

// NewRequestID mints "kyokreq_" + 24 lowercase hex characters.
func NewRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "kyokreq_" + hex.EncodeToString(b[:])
}

// Request is one completion call, verified by a door, for the leader.
type Request struct {
	RequestID string `json:"requestId"`
	RunID     string `json:"runId"`
	// ProviderKey and AgentName are the proven calling agent.
	ProviderKey string `json:"providerKey"`
	AgentName   string `json:"agentName"`
	// LLM is the offering the run is bound to.
	LLM Ref `json:"llm"`
	// Body is the agent's OpenAI chat-completion request, as sent.
	Body json.RawMessage `json:"body"`
	// Context is the caller's opaque context (null when none).
	Context json.RawMessage `json:"context"`
	// ActorChain is the run's chain, or null.
	ActorChain json.RawMessage `json:"actorChain"`
	// ReplyKey is the stream the leader answers on.
	ReplyKey string `json:"replyKey"`
	// Deadline (Unix milliseconds): a request not taken up by then is
	// dropped — the door has already answered 503.
	Deadline int64 `json:"deadline"`
}

// Reply kinds.
const (
	ReplyAccepted    = "accepted"    // written to the LLM provider's link
	ReplyUnavailable = "unavailable" // no link serves the offering now
	// ReplyBusy: the link serving the offering already has its limit of
	// completions in flight (config BrokerLimits.KyokMaxConcurrent); the
	// request was not sent and nothing is counted.
	ReplyBusy = "busy"
	// ReplyKeepAlive says the relay still holds the completion, while the
	// LLM provider is quiet: a door that hears nothing at all for longer
	// than KeepAliveSilence knows the leader serving it is gone.
	ReplyKeepAlive = "keepalive"
	ReplyChunk     = "chunk"
	ReplyDone      = "done"
	ReplyError     = "error"
	// ReplyRelayLost: the node relaying the completion stopped leading
	// and closed the LLM provider's link itself (a handover, a step-down)
	// — funduq's failure, not the LLM provider's; nothing is counted. A
	// door that does not know the kind hears silence after it, which it
	// reads the same way (KeepAliveSilence).
	ReplyRelayLost = "relay_lost"
)

// Reply is one entry on a reply stream.
type Reply struct {
	Kind string `json:"kind"`
	// Data is a chunk (ReplyChunk), exactly as the LLM provider sent it.
	Data json.RawMessage `json:"data,omitempty"`
	// Message says why (ReplyError, ReplyUnavailable).
	Message string `json:"message,omitempty"`
	// Refusal is the LLM provider's structured refusal, relayed intact.
	Refusal json.RawMessage `json:"refusal,omitempty"`
}

// ErrNotChatRequest is matched by ValidateChatRequest's refusals.
var ErrNotChatRequest = errors.New("not a chat-completion request")

// ValidateChatRequest checks body is an OpenAI chat-completion request in
// the shape the relay needs: an object with a non-empty string "model" and
// a non-empty "messages" array of objects each with a string "role".
// Extension keys pass through.
func ValidateChatRequest(body []byte) error {
	var messages []json.RawMessage
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(body, &probe); err != nil || probe == nil {
		return fmt.Errorf("%w: the body must be a JSON object", ErrNotChatRequest)
	}
	model, ok := jsonString(probe["model"])
	if !ok || model == "" {
		return fmt.Errorf("%w: \"model\" must be a non-empty string", ErrNotChatRequest)
	}
	// "stream" is a boolean or absent: read as anything else, the door
	// (StreamRequested: false) and a provider reading it loosely would
	// disagree about whether the agent asked for a stream.
	if s := bytes.TrimSpace(probe["stream"]); len(s) > 0 && !bytes.Equal(s, []byte("true")) &&
		!bytes.Equal(s, []byte("false")) && !bytes.Equal(s, []byte("null")) {
		return fmt.Errorf("%w: \"stream\" must be a boolean", ErrNotChatRequest)
	}
	// The exact key, as the LLM provider reads it (StreamRequested).
	if json.Unmarshal(probe["messages"], &messages) != nil || len(messages) == 0 {
		return fmt.Errorf("%w: \"messages\" must be a non-empty array", ErrNotChatRequest)
	}
	for i, m := range messages {
		var msg map[string]json.RawMessage
		if json.Unmarshal(m, &msg) != nil || msg == nil {
			return fmt.Errorf("%w: messages[%d] must be an object", ErrNotChatRequest, i)
		}
		if _, ok := jsonString(msg["role"]); !ok {
			return fmt.Errorf("%w: messages[%d].role must be a string", ErrNotChatRequest, i)
		}
	}
	return nil
}

// StreamRequested reports body's "stream": true. Members are matched by
// their exact key, as the LLM provider reads them (encoding/json's
// case-insensitive match would take "Stream" for "stream").
func StreamRequested(body []byte) bool {
	var stream bool
	_ = json.Unmarshal(member(body, "stream"), &stream)
	return stream
}

// ModelOf reads body's "model" ("" when absent).
func ModelOf(body []byte) string {
	model, _ := jsonString(member(body, "model"))
	return model
}

// member is body's member key, matched exactly (nil when absent).
func member(body []byte, key string) json.RawMessage {
	var obj map[string]json.RawMessage
	if json.Unmarshal(body, &obj) != nil {
		return nil
	}
	return obj[key]
}

// ValidateChunk checks data is an object that reads as an OpenAI
// ChatCompletionChunk: id, choices, created and model present, each choice
// with its index and delta, each tool-call delta with its index; id, model, each delta's role and content and
// each finish_reason strings (or null) as sent.
func ValidateChunk(data []byte) error {
	if d := bytes.TrimSpace(data); len(d) == 0 || d[0] != '{' {
		return errors.New("chunk data must be an object")
	}
	var c openai.ChatCompletionChunk
	if err := json.Unmarshal(data, &c); err != nil {
		return fmt.Errorf("chunk data is not a chat.completion.chunk: %v", err)
	}
	for _, f := range []struct {
		name string
		ok   bool
	}{{"id", c.JSON.ID.Valid()}, {"choices", c.JSON.Choices.Valid()}, {"created", c.JSON.Created.Valid()}, {"model", c.JSON.Model.Valid()}} {
		if !f.ok {
			return fmt.Errorf("chunk data is not a chat.completion.chunk: %q missing or invalid", f.name)
		}
	}
	for i, ch := range c.Choices {
		if !ch.JSON.Index.Valid() || !ch.JSON.Delta.Valid() {
			return fmt.Errorf("chunk data is not a chat.completion.chunk: choices[%d] needs index and delta", i)
		}
		// The index is the only thing that says which call a tool-call
		// delta continues (OpenAI requires it): read as 0, parallel calls
		// would collapse into one (design.md §KYOK).
		for j, tc := range ch.Delta.ToolCalls {
			if !tc.JSON.Index.Valid() {
				return fmt.Errorf("chunk data is not a chat.completion.chunk: choices[%d].delta.tool_calls[%d] needs its index", i, j)
			}
		}
	}
	// openai-go coerces what it reads (a content array becomes its JSON
	// text, a numeric id a string): the strings a collapse and the agent
	// read must be strings (or null) in the chunk itself, or the collapsed
	// answer would be a wrong one that looks like success.
	var typed struct {
		ID      *string `json:"id"`
		Model   *string `json:"model"`
		Choices []struct {
			Delta struct {
				Role      *string `json:"role"`
				Content   *string `json:"content"`
				Refusal   *string `json:"refusal"`
				ToolCalls []struct {
					Index    int64   `json:"index"`
					ID       *string `json:"id"`
					Type     *string `json:"type"`
					Function *struct {
						Name      *string `json:"name"`
						Arguments *string `json:"arguments"`
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"delta"`
			FinishReason *string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(data, &typed); err != nil {
		return fmt.Errorf("chunk data is not a chat.completion.chunk: %s", memberError(err))
	}
	return nil
}

// memberError says which member of a chunk did not decode, in the
// chunk's own terms rather than encoding/json's Go type names (an LLM
// provider is written in any language).
func memberError(err error) string {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) || te.Field == "" {
		return err.Error()
	}
	want := "another JSON type"
	switch te.Type.Kind() {
	case reflect.String:
		want = "a string"
	case reflect.Slice, reflect.Array:
		want = "an array"
	case reflect.Struct, reflect.Map, reflect.Pointer:
		want = "an object"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Float32, reflect.Float64:
		want = "a number"
	case reflect.Bool:
		want = "a boolean"
	}
	return fmt.Sprintf("%s must be %s (got %s)", te.Field, want, te.Value)
}

// Completion is the collapsed (non-streaming) answer.
type Completion struct {
	ID      string             `json:"id"`
	Object  string             `json:"object"`
	Created int64              `json:"created"`
	Model   string             `json:"model"`
	Choices []CompletionChoice `json:"choices"`
	Usage   json.RawMessage    `json:"usage,omitempty"`
}

// CompletionChoice is one choice of a collapsed answer.
type CompletionChoice struct {
	Index        int64             `json:"index"`
	Message      CompletionMessage `json:"message"`
	FinishReason string            `json:"finish_reason"`
	Logprobs     json.RawMessage   `json:"logprobs"`
}

// CompletionMessage is a collapsed choice's message. Refusal is null
// unless the model refused (OpenAI's message always has the member);
// Content is null when the model sent no content beside tool calls or a
// refusal, as OpenAI answers, and a string otherwise.
type CompletionMessage struct {
	Role      string     `json:"role"`
	Content   *string    `json:"content"`
	Refusal   *string    `json:"refusal"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
}

// ToolCall is one tool call of a collapsed message: the deltas of one
// tool-call index merged, id, type and name as first sent, the arguments
// concatenated.
type ToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// Collapse merges chunks into one chat.completion (design.md §KYOK): id,
// created and model from the first chunk; per choice index the contents
// and the refusals concatenated, the tool calls merged by their index, and
// the last non-empty finish reason (default "stop"); role assistant;
// choices sorted by index; the last usage seen. No chunks gives
// one empty assistant message with "stop" (id fallbackID, model
// fallbackModel, created now).
func Collapse(chunks []json.RawMessage, fallbackID, fallbackModel string, now int64) Completion {
	out := Completion{ID: fallbackID, Object: "chat.completion", Created: now, Model: fallbackModel}
	type acc struct {
		content, refusal []byte
		said, refused    bool
		calls            map[int64]*ToolCall
		finish           string
	}
	byIndex := map[int64]*acc{}
	for i, raw := range chunks {
		var c openai.ChatCompletionChunk
		if json.Unmarshal(raw, &c) != nil {
			continue
		}
		if i == 0 {
			out.ID, out.Created, out.Model = c.ID, c.Created, c.Model
		}
		for _, ch := range c.Choices {
			a := byIndex[ch.Index]
			if a == nil {
				a = &acc{}
				byIndex[ch.Index] = a
			}
			if ch.Delta.JSON.Content.Valid() {
				a.said = true
				a.content = append(a.content, ch.Delta.Content...)
			}
			if ch.Delta.JSON.Refusal.Valid() {
				a.refused = true
				a.refusal = append(a.refusal, ch.Delta.Refusal...)
			}
			for _, tc := range ch.Delta.ToolCalls {
				if a.calls == nil {
					a.calls = map[int64]*ToolCall{}
				}
				call := a.calls[tc.Index]
				if call == nil {
					call = &ToolCall{}
					a.calls[tc.Index] = call
				}
				if call.ID == "" {
					call.ID = tc.ID
				}
				if call.Type == "" {
					call.Type = tc.Type
				}
				if call.Function.Name == "" {
					call.Function.Name = tc.Function.Name
				}
				call.Function.Arguments += tc.Function.Arguments
			}
			if ch.FinishReason != "" {
				a.finish = ch.FinishReason
			}
		}
		if c.JSON.Usage.Valid() {
			out.Usage = json.RawMessage(c.JSON.Usage.Raw())
		}
	}
	if len(byIndex) == 0 {
		byIndex[0] = &acc{}
	}
	for _, k := range sortedKeys(byIndex) {
		a := byIndex[k]
		f := a.finish
		if f == "" {
			f = "stop"
		}
		m := CompletionMessage{Role: "assistant"}
		if content := string(a.content); a.said || (!a.refused && len(a.calls) == 0) {
			m.Content = &content
		}
		if a.refused {
			r := string(a.refusal)
			m.Refusal = &r
		}
		for _, i := range sortedKeys(a.calls) {
			m.ToolCalls = append(m.ToolCalls, *a.calls[i])
		}
		out.Choices = append(out.Choices, CompletionChoice{Index: k, FinishReason: f, Message: m, Logprobs: json.RawMessage("null")})
	}
	return out
}

// sortedKeys returns m's keys in increasing order.
func sortedKeys[V any](m map[int64]V) []int64 {
	return slices.Sorted(maps.Keys(m))
}
