package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"reflect"
	"strings"
	"unicode/utf8"
)

// FrameError is an inbound frame that does not decode. Message is what the
// sender is told in an error frame; the link stays open.
type FrameError struct {
	Message string
	RunID   string // the run a report frame named, when it named one
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
	h := peek(raw)
	if !h.ok {
		if v, ok := h.of(typeNames); ok {
			return nil, frameErr("frame refused: %s", CaseVariantMessage(v.member, v.field))
		}
		return nil, frameErr("unparseable frame")
	}
	switch h.typ {
	case TypeRegister:
		if v, ok := h.of(registerNames); ok {
			return nil, frameErr("register does not validate: %s", CaseVariantMessage(v.member, v.field))
		}
		if why := agentsVariant(raw); why != "" {
			return nil, frameErr("register does not validate: %s", why)
		}
		var f Register
		if err := decodeClosed(raw, &f); err != nil {
			return nil, frameErr("register does not validate: %s", closedError(err))
		}
		return f, nil
	case TypeDeleteAgent:
		if v, ok := h.of(deleteNames); ok {
			return nil, frameErr("deleteAgent refused: %s", CaseVariantMessage(v.member, v.field))
		}
		var f DeleteAgent
		if json.Unmarshal(raw, &f) != nil || f.Name == "" {
			return nil, frameErr("deleteAgent needs a name")
		}
		return f, nil
	case TypeAck:
		if err := h.reportVariant(raw, "ack", ackNames); err != nil {
			return nil, err
		}
		var f Ack
		if err := decodeReport(raw, "ack", &f, &f.RunID); err != nil {
			return nil, err
		}
		return f, nil
	case TypeEvent:
		if err := h.reportVariant(raw, "event", eventNames); err != nil {
			return nil, err
		}
		var f Event
		if err := decodeReport(raw, "event", &f, &f.RunID); err != nil {
			return nil, err
		}
		if len(f.Event) == 0 || string(f.Event) == "null" {
			return nil, &FrameError{Message: "event refused: the frame carries no event", RunID: f.RunID}
		}
		return f, nil
	case TypeFinish:
		if err := h.reportVariant(raw, "finish", finishNames); err != nil {
			return nil, err
		}
		var f Finish
		if err := decodeReport(raw, "finish", &f, &f.RunID); err != nil {
			return nil, err
		}
		return f, nil
	case TypeQuery:
		if v, ok := h.of(queryNames); ok {
			return nil, frameErr("query refused: %s", CaseVariantMessage(v.member, v.field))
		}
		var f Query
		if json.Unmarshal(raw, &f) != nil || f.QueryID == "" {
			return nil, frameErr("query needs a queryId")
		}
		return f, nil
	}
	return nil, frameErr("unexpected frame '%s'", clip(h.typ, 64))
}

// reportVariant refuses a report frame (ack, event, finish) with a member
// named like one of its fields but not exactly, naming the run its exact
// runId names, if any (D15): nothing of the frame is read as the field.
func (h *head) reportVariant(raw []byte, kind string, fields []string) *FrameError {
	v, ok := h.of(fields)
	if !ok {
		return nil
	}
	// Off the hot path: only such a frame is read again, by exact names.
	var members map[string]json.RawMessage
	var runID string
	if json.Unmarshal(raw, &members) == nil && json.Unmarshal(members["runId"], &runID) != nil {
		runID = ""
	}
	return &FrameError{Message: kind + " refused: " + CaseVariantMessage(v.member, v.field), RunID: runID}
}

// decodeReport decodes a report frame (ack, event, finish) into f. A frame
// whose runId is a string but another field is mistyped is refused naming
// that run and the field, so the provider knows which report was not
// taken (design.md D15); one without a runId says so.
func decodeReport(raw []byte, kind string, f any, runID *string) *FrameError {
	// Unmarshal fills every field it can before it reports the first
	// mistyped one, so runID is read even when another field is wrong.
	err := json.Unmarshal(raw, f)
	if *runID == "" {
		return frameErr("%s needs a runId", kind)
	}
	if err == nil {
		return nil
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		field, want := clip(te.Field, 64), jsonKind(te.Type.Kind())
		if want == "a number" && strings.HasPrefix(te.Value, "number") {
			// The only number field a report has is an integer (an
			// event's seq): a fraction or an exponent is refused as
			// such, not as a range it may well be within.
			num := strings.TrimPrefix(te.Value, "number ")
			if integerOutOfRange(num) {
				return &FrameError{Message: fmt.Sprintf("%s refused: %s is out of range", kind, field), RunID: *runID}
			}
			return &FrameError{Message: fmt.Sprintf("%s refused: %s must be an integer written without a fraction or exponent (got %s)",
				kind, field, clip(num, 32)), RunID: *runID}
		}
		return &FrameError{Message: fmt.Sprintf("%s refused: %s must be %s (got %s)", kind, field, want, te.Value), RunID: *runID}
	}
	return &FrameError{Message: kind + " refused: the frame does not decode", RunID: *runID}
}

// maxNumberParsed bounds the JSON number literals integerOutOfRange does
// arithmetic on: big.ParseFloat's work grows as the square of the digits,
// and a frame may hold megabytes of them.
const maxNumberParsed = 64

// integerOutOfRange reports whether the JSON number literal num, which
// did not decode as an int64, is an integer past the int64 range rather
// than a fraction or an integer written with one or an exponent. A literal
// longer than maxNumberParsed is read by its characters alone: one without
// a fraction or an exponent is out of range, any other is refused as
// written with one.
func integerOutOfRange(num string) bool {
	if len(num) > maxNumberParsed {
		return !strings.ContainsAny(num, ".eE")
	}
	f, _, err := big.ParseFloat(num, 10, 64, big.ToNearestEven)
	if err != nil || !f.IsInt() {
		return false
	}
	_, acc := f.Int64()
	return acc != big.Exact
}

// jsonKind names a Go kind as the JSON value it decodes from.
func jsonKind(k reflect.Kind) string {
	switch k {
	case reflect.Bool:
		return "a boolean"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return "a number"
	}
	return "another JSON type"
}

// DecodeKyokFrame reads one text frame an LLM provider sent on /ws/kyok
// after the handshake: a RegisterModels, DeleteModel or Answer, or a
// *FrameError.
func DecodeKyokFrame(raw []byte) (any, error) {
	h := peek(raw)
	if !h.ok {
		if v, ok := h.of(typeNames); ok {
			return nil, frameErr("frame refused: %s", CaseVariantMessage(v.member, v.field))
		}
		return nil, frameErr("unparseable frame")
	}
	typ := h.typ
	switch typ {
	case TypeRegister:
		if v, ok := h.of(modelsNames); ok {
			return nil, frameErr("register does not validate: %s", CaseVariantMessage(v.member, v.field))
		}
		var f RegisterModels
		if err := decodeClosed(raw, &f); err != nil {
			return nil, frameErr("register does not validate: %s", closedError(err))
		}
		return f, nil
	case TypeDeleteModel:
		if v, ok := h.of(deleteNames); ok {
			return nil, frameErr("deleteModel refused: %s", CaseVariantMessage(v.member, v.field))
		}
		var f DeleteModel
		if json.Unmarshal(raw, &f) != nil || f.Name == "" {
			return nil, frameErr("deleteModel needs a name")
		}
		return f, nil
	case TypeChunk, TypeDone, TypeError:
		if v, ok := h.of(answerNames); ok {
			return nil, frameErr("%s frame does not decode: %s", typ, CaseVariantMessage(v.member, v.field))
		}
		var f Answer
		if err := json.Unmarshal(raw, &f); err != nil {
			// Named by a requestId that reads, the frame is wrong elsewhere:
			// say so, not that the id is missing.
			var named struct {
				RequestID string `json:"requestId"`
			}
			if json.Unmarshal(raw, &named) == nil && named.RequestID != "" {
				return nil, frameErr("%s frame does not decode: %s", typ, closedError(err))
			}
			return nil, frameErr("frame needs a requestId")
		}
		if f.RequestID == "" {
			return nil, frameErr("frame needs a requestId")
		}
		f.Type = typ
		return f, nil
	}
	return nil, frameErr("unknown frame type '%s'", clip(typ, 64))
}

// closedError says what decodeClosed refused in the frame's own keys (an
// unknown key, a mistyped value at its path), not in Go's type names.
func closedError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return fmt.Sprintf("%s must be %s (got %s)", clip(te.Field, 64), jsonKind(te.Type.Kind()), clip(te.Value, 32))
	}
	if key, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return "unknown key " + clip(key, 80)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return "not valid JSON"
	}
	return "the frame does not decode"
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
