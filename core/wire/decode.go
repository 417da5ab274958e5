package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// FrameError is an inbound frame that does not decode. Message is what the
// sender is told in an error frame; the link stays open.
type FrameError struct {
	Message string
}

func (e *FrameError) Error() string { return e.Message }

func frameErr(format string, args ...any) *FrameError {
	return &FrameError{Message: fmt.Sprintf(format, args...)}
}

// Answer is a chunk, done or error frame on /ws/kyok: one part of a
// completion's answer.
type Answer struct {
	Type      string          `json:"-"`
	RequestID string          `json:"requestId"`
	Data      json.RawMessage `json:"data"`
	Message   *string         `json:"message"`
	Refusal   json.RawMessage `json:"refusal"`
}

// DecodeProviderFrame reads one text frame a provider sent on
// /ws/provider after the handshake: a Register, DeleteAgent, Ack, Event,
// Finish or Query, or a *FrameError saying what is wrong with it.
func DecodeProviderFrame(raw []byte) (any, error) {
	typ, ok := PeekType(raw)
	if !ok {
		return nil, frameErr("unparseable frame")
	}
	switch typ {
	case TypeRegister:
		var f Register
		if err := decodeClosed(raw, &f); err != nil {
			return nil, frameErr("register does not validate: %s", clip(err.Error(), 200))
		}
		return f, nil
	case TypeDeleteAgent:
		var f DeleteAgent
		if json.Unmarshal(raw, &f) != nil || f.Name == "" {
			return nil, frameErr("deleteAgent needs a name")
		}
		return f, nil
	case TypeAck:
		var f Ack
		if json.Unmarshal(raw, &f) != nil || f.RunID == "" {
			return nil, frameErr("ack needs a runId")
		}
		return f, nil
	case TypeEvent:
		var f Event
		if json.Unmarshal(raw, &f) != nil || f.RunID == "" {
			return nil, frameErr("event needs a runId and an event")
		}
		return f, nil
	case TypeFinish:
		var f Finish
		if json.Unmarshal(raw, &f) != nil || f.RunID == "" {
			return nil, frameErr("finish needs a runId")
		}
		return f, nil
	case TypeQuery:
		var f Query
		if json.Unmarshal(raw, &f) != nil || f.QueryID == "" {
			return nil, frameErr("query needs a queryId")
		}
		return f, nil
	}
	return nil, frameErr("unexpected frame '%s'", clip(typ, 64))
}

// DecodeKyokFrame reads one text frame an LLM provider sent on /ws/kyok
// after the handshake: a RegisterModels, DeleteModel or Answer, or a
// *FrameError.
func DecodeKyokFrame(raw []byte) (any, error) {
	typ, ok := PeekType(raw)
	if !ok {
		return nil, frameErr("unparseable frame")
	}
	switch typ {
	case TypeRegister:
		var f RegisterModels
		if err := decodeClosed(raw, &f); err != nil {
			return nil, frameErr("register does not validate: %s", clip(err.Error(), 200))
		}
		return f, nil
	case TypeDeleteModel:
		var f DeleteModel
		if json.Unmarshal(raw, &f) != nil || f.Name == "" {
			return nil, frameErr("deleteModel needs a name")
		}
		return f, nil
	case TypeChunk, TypeDone, TypeError:
		var f Answer
		if json.Unmarshal(raw, &f) != nil || f.RequestID == "" {
			return nil, frameErr("frame needs a requestId")
		}
		f.Type = typ
		return f, nil
	}
	return nil, frameErr("unknown frame type '%s'", clip(typ, 64))
}

// decodeClosed decodes raw into v refusing unknown keys.
func decodeClosed(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

// clip shortens s to at most n bytes on a rune boundary, for echoing
// outside input back in an error.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
