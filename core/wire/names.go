package wire

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/funduq/funduq-go/core/jsonscan"
)

// A frame's members are read by their exact names, as the reference reads
// them (design.md §The provider wire, "Exact names"). encoding/json, which
// decodes the frames, matches a member to a field ignoring case (the last
// match winning), so a member whose name differs from one of its frame's
// fields only in case is refused before the decode, naming the member: it
// is never read as that field. The check rides on the type peek's one pass
// over the top-level members; a frame our SDK writes has no such member.

// inboundNames are the member names of every frame a provider sends funduq
// after the handshake, on /ws/provider and /ws/kyok: no two are equal
// ignoring case, so a name is the case variant of at most one of them.
var inboundNames = []string{"type", "agents", "providerName", "name", "runId", "accepted", "reason",
	"event", "seq", "queryId", "method", "params", "models", "metadata", "requestId", "data", "message",
	"refusal"}

// isInboundName is inboundNames as a switch: every honest member is one,
// and is told so without folding.
func isInboundName(k string) bool {
	switch k {
	case "type", "agents", "providerName", "name", "runId", "accepted", "reason",
		"event", "seq", "queryId", "method", "params", "models", "metadata", "requestId", "data", "message",
		"refusal":
		return true
	}
	return false
}

// The fields of each inbound frame, its "type" included; a member that
// differs from one of them only in case is refused.
var (
	registerNames     = []string{"type", "agents", "providerName"}
	registrationNames = []string{"name", "description", "agentCardExtra", "metadata", "takesInterjections"}
	deleteNames       = []string{"type", "name"}
	ackNames          = []string{"type", "runId", "accepted", "reason"}
	eventNames        = []string{"type", "runId", "event", "seq"}
	finishNames       = []string{"type", "runId"}
	queryNames        = []string{"type", "queryId", "method", "params"}
	modelsNames       = []string{"type", "models", "metadata"}
	answerNames       = []string{"type", "requestId", "data", "message", "refusal"}
	typeNames         = []string{"type"}
)

// ThreadMessagesParamNames are thread_messages' params.
var ThreadMessagesParamNames = []string{"threadId", "limit"}

// variant is a member named like a field but not exactly.
type variant struct{ member, field string }

// CaseVariantMessage says that member is not field.
func CaseVariantMessage(member, field string) string {
	return fmt.Sprintf("member %q differs from %q only in case", clip(member, 64), field)
}

// head is what the type peek's one pass learns of a frame.
type head struct {
	typ string
	ok  bool
	// variants are the top-level members whose names differ from an
	// inbound name only in case, in order; nil for an honest frame.
	variants []variant
}

// of says the first of h's variants that is one of fields'.
func (h *head) of(fields []string) (variant, bool) {
	for _, v := range h.variants {
		for _, f := range fields {
			if v.field == f {
				return v, true
			}
		}
	}
	return variant{}, false
}

// foldedName is the inbound name k differs from only in case, or "".
// Folding is strings.EqualFold's, which is encoding/json's matching.
func foldedName(k string) string {
	if isInboundName(k) {
		return ""
	}
	for _, n := range inboundNames {
		if strings.EqualFold(k, n) {
			return n
		}
	}
	return ""
}

// peek reads a frame's exact "type" and notes the members named like an
// inbound field but not exactly, in one pass that builds nothing. ok is
// false when raw is not a JSON object with a string type; the last
// "type" counts, and null unsets it, as encoding/json reads a *string.
func peek(raw []byte) (h head) {
	dec := jsonscan.Open(raw, jsonscan.Loose...)
	defer dec.Close()
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return head{}
	}
	for dec.PeekKind() == '"' {
		key, err := dec.ReadToken()
		if err != nil {
			return head{}
		}
		if k := key.String(); k != "type" {
			if f := foldedName(k); f != "" {
				h.variants = append(h.variants, variant{k, f})
			}
			if dec.SkipValue() != nil {
				return head{}
			}
			continue
		}
		v, err := dec.ReadToken()
		if err != nil {
			return head{}
		}
		switch v.Kind() {
		case '"':
			h.typ, h.ok = v.String(), true
		case 'n':
			h.typ, h.ok = "", false
		default: // not a string: encoding/json refuses the frame
			return head{}
		}
	}
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '}' {
		return head{}
	}
	if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
		return head{}
	}
	return h
}

// MemberVariant says the first member of the JSON object obj whose name
// differs from one of fields only in case, and that field; "" when there
// is none or obj is not an object.
func MemberVariant(obj []byte, fields ...string) (member, field string) {
	dec := jsonscan.Open(obj, jsonscan.Loose...)
	defer dec.Close()
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return "", ""
	}
	for dec.PeekKind() == '"' {
		key, err := dec.ReadToken()
		if err != nil {
			return "", ""
		}
		if f := variantOf(key.String(), fields); f != "" {
			return key.String(), f
		}
		if dec.SkipValue() != nil {
			return "", ""
		}
	}
	return "", ""
}

// variantOf is the one of fields k differs from only in case, or "".
func variantOf(k string, fields []string) string {
	for _, f := range fields {
		if k == f {
			return ""
		}
	}
	for _, f := range fields {
		if strings.EqualFold(k, f) {
			return f
		}
	}
	return ""
}

// agentsVariant says the first agent of a register frame with a member
// named like a Registration field but not exactly, as "agents[i] member
// …"; "" when there is none. A register is read once per link, so this
// second pass is off the hot path.
func agentsVariant(raw []byte) string {
	dec := jsonscan.Open(raw, jsonscan.Loose...)
	defer dec.Close()
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return ""
	}
	for dec.PeekKind() == '"' {
		key, err := dec.ReadToken()
		if err != nil {
			return ""
		}
		if key.String() != "agents" || dec.PeekKind() != '[' {
			if dec.SkipValue() != nil {
				return ""
			}
			continue
		}
		if _, err := dec.ReadToken(); err != nil {
			return ""
		}
		for i := 0; dec.PeekKind() != ']'; i++ {
			v, err := dec.ReadValue()
			if err != nil {
				return ""
			}
			if m, f := MemberVariant(v, registrationNames...); m != "" {
				return fmt.Sprintf("agents[%d] %s", i, CaseVariantMessage(m, f))
			}
		}
		if _, err := dec.ReadToken(); err != nil {
			return ""
		}
	}
	return ""
}
