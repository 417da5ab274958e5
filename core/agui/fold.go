package agui

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Fold turns a finished run's events into the AG-UI messages appended to its
// thread, in order of first appearance:
//
//   - TEXT_MESSAGE_START/CONTENT accumulate one message per messageId (role
//     from the event that opens it, default "assistant"); TEXT_MESSAGE_CHUNK
//     does the same, a chunk with a messageId opening or continuing that
//     message and one without continuing the open chunk stream.
//   - TOOL_CALL_START (or a TOOL_CALL_CHUNK that opens a call) adds a
//     toolCalls entry {id, type:"function", function:{name, arguments:""}}
//     to its parentMessageId's assistant message, or else to an assistant
//     message keyed by the tool call id; TOOL_CALL_ARGS and later chunks
//     append to its arguments.
//   - TOOL_CALL_RESULT becomes a role "tool" message with its messageId,
//     content and toolCallId.
//   - Everything else, unknown types included, produces nothing.
//
// Each message is compact JSON without HTML escaping, keys in the order id,
// role, content, then toolCalls (assistant) or toolCallId (tool). A message
// gets "content" when a text event touched it or its role requires one; an
// assistant message that only holds tool calls has none. Fold expects events
// Validate accepted: the first it would reject makes Fold fail with an error
// wrapping ErrMalformed.
func Fold(events []json.RawMessage) ([]json.RawMessage, error) {
	f := folder{byID: map[string]*foldMessage{}, calls: map[string]*foldCall{}}
	for i, raw := range events {
		info, obj, err := validate(raw)
		if err != nil {
			return nil, fmt.Errorf("event %d: %w", i, err)
		}
		if !info.Known {
			continue
		}
		f.apply(info.Type, obj)
	}
	return f.render()
}

type foldMessage struct {
	id, role   string
	hasContent bool
	content    strings.Builder
	toolCalls  []*foldCall

	// A tool message (from TOOL_CALL_RESULT) is set apart by tool.
	tool        bool
	toolCallID  string
	toolContent json.RawMessage
}

type foldCall struct {
	id, name string
	args     strings.Builder
}

type folder struct {
	order []*foldMessage
	byID  map[string]*foldMessage // text and tool-call-holding messages
	calls map[string]*foldCall

	// The open chunk streams: the message a TEXT_MESSAGE_CHUNK without a
	// messageId continues, the call a TOOL_CALL_CHUNK without a toolCallId
	// continues.
	textChunk, callChunk         string
	textChunkOpen, callChunkOpen bool
}

// standsAside lists the known types that do not end an open chunk stream.
var standsAside = map[string]bool{
	TypeRaw:                     true,
	TypeActivitySnapshot:        true,
	TypeActivityDelta:           true,
	TypeReasoningEncryptedValue: true,
}

// EndsTextChunks reports whether an event of type typ ends an open
// TEXT_MESSAGE_CHUNK stream, after which a chunk without a messageId
// continues nothing: every known type but the chunk itself and those that
// stand aside (RAW, the activity events, REASONING_ENCRYPTED_VALUE), as
// @ag-ui/client's transformChunks reads them. An unknown type does not.
func EndsTextChunks(typ string) bool {
	return IsKnown(typ) && typ != TypeTextMessageChunk && !standsAside[typ]
}

func (f *folder) apply(typ string, obj map[string]json.RawMessage) {
	if !standsAside[typ] {
		if typ != TypeTextMessageChunk {
			f.textChunkOpen = false
		}
		if typ != TypeToolCallChunk {
			f.callChunkOpen = false
		}
	}
	switch typ {
	case TypeTextMessageStart:
		id, _ := stringField(obj, "messageId")
		role, ok := stringField(obj, "role")
		if !ok {
			role = "assistant"
		}
		f.message(id, role).hasContent = true
	case TypeTextMessageContent:
		id, _ := stringField(obj, "messageId")
		delta, _ := stringField(obj, "delta")
		m := f.message(id, "assistant")
		m.hasContent = true
		m.content.WriteString(delta)
	case TypeTextMessageChunk:
		id, hasID := stringField(obj, "messageId")
		switch {
		case hasID:
			f.textChunk, f.textChunkOpen = id, true
		case f.textChunkOpen:
			id = f.textChunk
		default:
			return // continues nothing: there is no open chunk stream
		}
		role, ok := stringField(obj, "role")
		if !ok {
			role = "assistant"
		}
		m := f.message(id, role)
		m.hasContent = true
		delta, _ := stringField(obj, "delta")
		m.content.WriteString(delta)
	case TypeToolCallStart:
		id, _ := stringField(obj, "toolCallId")
		name, _ := stringField(obj, "toolCallName")
		parent, _ := stringField(obj, "parentMessageId")
		f.startCall(id, name, parent)
	case TypeToolCallArgs:
		id, _ := stringField(obj, "toolCallId")
		if c := f.calls[id]; c != nil {
			delta, _ := stringField(obj, "delta")
			c.args.WriteString(delta)
		}
	case TypeToolCallChunk:
		id, hasID := stringField(obj, "toolCallId")
		switch {
		case hasID:
			f.callChunk, f.callChunkOpen = id, true
		case f.callChunkOpen:
			id = f.callChunk
		default:
			return
		}
		name, _ := stringField(obj, "toolCallName")
		c := f.calls[id]
		if c == nil {
			parent, _ := stringField(obj, "parentMessageId")
			c = f.startCall(id, name, parent)
		} else if c.name == "" {
			c.name = name
		}
		delta, _ := stringField(obj, "delta")
		c.args.WriteString(delta)
	case TypeToolCallResult:
		id, _ := stringField(obj, "messageId")
		callID, _ := stringField(obj, "toolCallId")
		f.order = append(f.order, &foldMessage{
			id: id, role: "tool", tool: true,
			toolCallID: callID, toolContent: obj["content"],
		})
	}
}

// message returns the message keyed id, creating it with role if it is new.
// An existing message keeps the role it was opened with.
func (f *folder) message(id, role string) *foldMessage {
	if m := f.byID[id]; m != nil {
		return m
	}
	m := &foldMessage{id: id, role: role}
	f.byID[id] = m
	f.order = append(f.order, m)
	return m
}

// startCall records a new tool call (a repeated id keeps the first) on its
// holding assistant message.
func (f *folder) startCall(id, name, parent string) *foldCall {
	if c := f.calls[id]; c != nil {
		return c
	}
	c := &foldCall{id: id, name: name}
	f.calls[id] = c
	var holder *foldMessage
	if parent != "" {
		holder = f.message(parent, "assistant")
	}
	if holder == nil || holder.role != "assistant" {
		// Only assistant messages carry toolCalls.
		if m := f.message(id, "assistant"); m.role == "assistant" || holder == nil {
			holder = m
		}
	}
	holder.toolCalls = append(holder.toolCalls, c)
	return c
}

type functionJSON struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type toolCallJSON struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function functionJSON `json:"function"`
}

type messageJSON struct {
	ID        string         `json:"id"`
	Role      string         `json:"role"`
	Content   *string        `json:"content,omitempty"`
	ToolCalls []toolCallJSON `json:"toolCalls,omitempty"`
}

type toolMessageJSON struct {
	ID         string          `json:"id"`
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCallID string          `json:"toolCallId"`
}

func (f *folder) render() ([]json.RawMessage, error) {
	out := make([]json.RawMessage, 0, len(f.order))
	for _, m := range f.order {
		var v any
		if m.tool {
			v = toolMessageJSON{ID: m.id, Role: "tool", Content: m.toolContent, ToolCallID: m.toolCallID}
		} else {
			mj := messageJSON{ID: m.id, Role: m.role}
			if m.hasContent || m.role != "assistant" {
				s := m.content.String()
				mj.Content = &s
			}
			for _, c := range m.toolCalls {
				mj.ToolCalls = append(mj.ToolCalls, toolCallJSON{
					ID: c.id, Type: "function",
					Function: functionJSON{Name: c.name, Arguments: c.args.String()},
				})
			}
			v = mj
		}
		b, err := encodeCompact(v)
		if err != nil {
			return nil, fmt.Errorf("agui: encoding folded message %q: %w", m.id, err)
		}
		out = append(out, b)
	}
	return out, nil
}
