package agui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/funduq/funduq-go/core/strictjson"
	"github.com/funduq/funduq-go/functions/door"
)

// RunAgentInput is an AG-UI RunAgentInput as the door reads a caller's
// body. Keys the door does not use (protocolVersion, …) are ignored.
type RunAgentInput struct {
	ThreadID    string
	CallerRunID string // the caller's run id: never adopted, only an idempotency key
	ParentRunID string
	State       json.RawMessage
	Messages    []json.RawMessage
	Tools       []json.RawMessage
	Context     []json.RawMessage
	// ForwardedProps is the caller's bag verbatim (any JSON value, or nil).
	ForwardedProps json.RawMessage
	// Resume is the resume array as sent (nil when absent or null).
	Resume        json.RawMessage
	ResumeEntries []ResumeEntry
}

// ResumeEntry is one answer to an interrupt.
type ResumeEntry struct {
	InterruptID string
	Status      string // "resolved" or "cancelled"
	Payload     json.RawMessage
}

// HasToolMessages reports whether any message has role "tool".
func (in RunAgentInput) HasToolMessages() bool {
	for _, m := range in.Messages {
		if roleOf(m) == "tool" {
			return true
		}
	}
	return false
}

func roleOf(m json.RawMessage) string { return memberString(m, "role") }

// memberString is the string the JSON object m's member key holds ("" for
// none), read by its exact name as the provider reads it (design.md §The
// doors, "Exact names"): a struct field would also take "Role", the last
// match winning.
func memberString(m json.RawMessage, key string) string {
	var obj map[string]json.RawMessage
	var s string
	if json.Unmarshal(m, &obj) != nil || json.Unmarshal(obj[key], &s) != nil {
		return ""
	}
	return s
}

func invalid(format string, args ...any) *door.Error {
	return door.Refuse(http.StatusUnprocessableEntity, door.CodeInvalidRunInput, format, args...)
}

// ParseRunAgentInput reads body as an AG-UI RunAgentInput. Malformed JSON is
// a 400 (malformed_json); a well-formed body of the wrong shape is a 422
// (invalid_run_input) naming the offending field; a message, the state, a
// tool, a context entry, a resume entry or forwardedProps holding what
// funduq cannot carry is a 400 (bad_request, door.RefuseUnstorable), as is
// a threadId, runId or parentRunId that cannot be stored as sent. Every
// error is a *door.Error. An accepted input always builds: each message is an object
// with a non-empty string role, tools and context entries are objects.
func ParseRunAgentInput(body []byte) (RunAgentInput, error) {
	var in RunAgentInput
	if !json.Valid(body) {
		return in, door.Refuse(http.StatusBadRequest, door.CodeMalformedJSON, "the body is not valid JSON")
	}
	if k := firstByte(body); k != '{' {
		return in, invalid("the body must be a JSON object (an AG-UI RunAgentInput)")
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		return in, invalid("the body must be a JSON object: %v", err)
	}
	var err error
	if in.ThreadID, err = requiredString(obj, "threadId"); err != nil {
		return in, err
	}
	if in.CallerRunID, err = requiredString(obj, "runId"); err != nil {
		return in, err
	}
	// Both are kept to recognise a retry (door.MaxCallerID).
	for _, id := range []struct{ name, v string }{{"threadId", in.ThreadID}, {"runId", in.CallerRunID}} {
		if len(id.v) > door.MaxCallerID {
			return in, invalid("%s is %d bytes; at most %d are accepted", id.name, len(id.v), door.MaxCallerID)
		}
	}
	if raw, ok := present(obj, "parentRunId"); ok {
		if err := json.Unmarshal(raw, &in.ParentRunID); err != nil || firstByte(raw) != '"' {
			return in, invalid("parentRunId must be a string or null")
		}
	}
	// Kept (and a parentRunId relayed) as sent or not at all: they are
	// decoded, and Go reads a lone surrogate escape as U+FFFD, so "r\ud800"
	// and "r\udbff" would be one retry key; a NUL no text column holds.
	for _, name := range []string{"threadId", "runId", "parentRunId"} {
		if why := strictjson.Unstorable(obj[name]); why != "" {
			return in, door.Refuse(http.StatusBadRequest, door.CodeBadRequest, "%s cannot be stored as sent: it %s", name, why)
		}
	}
	if raw, ok := present(obj, "state"); ok {
		// Relayed as sent or not at all, like the messages and the bag.
		if e := door.RefuseUnstorable(raw, "state"); e != nil {
			return in, e
		}
		in.State = raw
	}
	if raw, ok := present(obj, "forwardedProps"); ok {
		// The caller's bag: door.ReadBag refuses the same later, but an
		// accepted input always builds.
		if e := door.RefuseUnstorable(raw, "forwardedProps"); e != nil {
			return in, e
		}
		in.ForwardedProps = raw
	}
	if in.Messages, err = objects(obj, "messages"); err != nil {
		return in, err
	}
	for i, m := range in.Messages {
		// Relayed as sent or not at all (door.RefuseUnstorable): its keys
		// are decoded to lay it out for the provider.
		if e := door.RefuseUnstorable(m, fmt.Sprintf("messages[%d]", i)); e != nil {
			return in, e
		}
		var msg map[string]json.RawMessage
		_ = json.Unmarshal(m, &msg)
		var role string
		if r, ok := msg["role"]; !ok || firstByte(r) != '"' || json.Unmarshal(r, &role) != nil || role == "" {
			return in, invalid("messages[%d].role must be a non-empty string", i)
		}
		want, known := contentKinds[role]
		if !known {
			return in, invalid("messages[%d].role %q is not an AG-UI role (user, assistant, system, developer, tool, activity, reasoning)", i, role)
		}
		if c, ok := msg["content"]; ok && firstByte(c) != 'n' && !strings.ContainsRune(want, rune(firstByte(c))) {
			return in, invalid("messages[%d].content of a %s message must be %s", i, role, contentNames[want])
		}
		if role == "tool" {
			if r, ok := msg["toolCallId"]; !ok || firstByte(r) != '"' {
				return in, invalid("messages[%d].toolCallId must be a string on a tool message", i)
			}
		}
	}
	if in.Tools, err = objects(obj, "tools"); err != nil {
		return in, err
	}
	if in.Context, err = objects(obj, "context"); err != nil {
		return in, err
	}
	entries, err := objects(obj, "resume")
	if err != nil {
		return in, err
	}
	// Relayed as sent or not at all (door.RefuseUnstorable), like the
	// messages: an agent echoing them would have its run failed (D18).
	for _, list := range []struct {
		name  string
		items []json.RawMessage
	}{{"tools", in.Tools}, {"context", in.Context}, {"resume", entries}} {
		for i, it := range list.items {
			if e := door.RefuseUnstorable(it, fmt.Sprintf("%s[%d]", list.name, i)); e != nil {
				return in, e
			}
		}
	}
	if raw, ok := present(obj, "resume"); ok {
		in.Resume = raw
	}
	for i, e := range entries {
		var m map[string]json.RawMessage
		_ = json.Unmarshal(e, &m)
		var re ResumeEntry
		if r, ok := m["interruptId"]; !ok || firstByte(r) != '"' || json.Unmarshal(r, &re.InterruptID) != nil || re.InterruptID == "" {
			return in, invalid("resume[%d].interruptId must be a non-empty string", i)
		}
		if r, ok := m["status"]; !ok || firstByte(r) != '"' || json.Unmarshal(r, &re.Status) != nil ||
			(re.Status != "resolved" && re.Status != "cancelled") {
			return in, invalid(`resume[%d].status must be "resolved" or "cancelled"`, i)
		}
		re.Payload = m["payload"]
		in.ResumeEntries = append(in.ResumeEntries, re)
	}
	return in, nil
}

// present returns obj[key] unless it is absent or null.
func present(obj map[string]json.RawMessage, key string) (json.RawMessage, bool) {
	raw, ok := obj[key]
	if !ok || firstByte(raw) == 'n' {
		return nil, false
	}
	return raw, true
}

func requiredString(obj map[string]json.RawMessage, key string) (string, error) {
	raw, ok := obj[key]
	var s string
	if !ok || firstByte(raw) != '"' || json.Unmarshal(raw, &s) != nil {
		return "", invalid("%s is required and must be a string", key)
	}
	return s, nil
}

// objects reads obj[key] as an array of JSON objects; absent or null is an
// empty list.
func objects(obj map[string]json.RawMessage, key string) ([]json.RawMessage, error) {
	raw, ok := present(obj, key)
	if !ok {
		return nil, nil
	}
	if firstByte(raw) != '[' {
		return nil, invalid("%s must be an array", key)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, invalid("%s must be an array: %v", key, err)
	}
	for i, it := range items {
		if firstByte(it) != '{' {
			return nil, invalid("%s[%d] must be an object", key, i)
		}
	}
	return items, nil
}

func firstByte(raw []byte) byte {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return 0
	}
	return raw[0]
}

// contentKinds is, for each AG-UI message role, the first bytes its
// content may start with when present and not null: a string, a user's
// multimodal parts (an array), an activity's object.
var contentKinds = map[string]string{
	"user": `"[`, "assistant": `"`, "system": `"`, "developer": `"`, "tool": `"`, "reasoning": `"`, "activity": `{`,
}

var contentNames = map[string]string{`"[`: "a string or an array of parts", `"`: "a string", `{`: "an object"}
