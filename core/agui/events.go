package agui

import (
	"bytes"
	"encoding/json"
)

// The AG-UI event type names. The THINKING_* family is deprecated in favour
// of REASONING_* and absent from AG-UI 1.0, but pre-1.0 SDKs still emit it.
const (
	TypeRunStarted   = "RUN_STARTED"
	TypeRunFinished  = "RUN_FINISHED"
	TypeRunError     = "RUN_ERROR"
	TypeStepStarted  = "STEP_STARTED"
	TypeStepFinished = "STEP_FINISHED"

	TypeTextMessageStart   = "TEXT_MESSAGE_START"
	TypeTextMessageContent = "TEXT_MESSAGE_CONTENT"
	TypeTextMessageEnd     = "TEXT_MESSAGE_END"
	TypeTextMessageChunk   = "TEXT_MESSAGE_CHUNK"

	TypeToolCallStart  = "TOOL_CALL_START"
	TypeToolCallArgs   = "TOOL_CALL_ARGS"
	TypeToolCallEnd    = "TOOL_CALL_END"
	TypeToolCallChunk  = "TOOL_CALL_CHUNK"
	TypeToolCallResult = "TOOL_CALL_RESULT"

	TypeStateSnapshot    = "STATE_SNAPSHOT"
	TypeStateDelta       = "STATE_DELTA"
	TypeMessagesSnapshot = "MESSAGES_SNAPSHOT"

	TypeActivitySnapshot = "ACTIVITY_SNAPSHOT"
	TypeActivityDelta    = "ACTIVITY_DELTA"

	TypeRaw    = "RAW"
	TypeCustom = "CUSTOM"

	TypeReasoningStart          = "REASONING_START"
	TypeReasoningMessageStart   = "REASONING_MESSAGE_START"
	TypeReasoningMessageContent = "REASONING_MESSAGE_CONTENT"
	TypeReasoningMessageEnd     = "REASONING_MESSAGE_END"
	TypeReasoningMessageChunk   = "REASONING_MESSAGE_CHUNK"
	TypeReasoningEnd            = "REASONING_END"
	TypeReasoningEncryptedValue = "REASONING_ENCRYPTED_VALUE"

	TypeSubagentStarted  = "SUBAGENT_STARTED"
	TypeSubagentFinished = "SUBAGENT_FINISHED"
	TypeSubagentError    = "SUBAGENT_ERROR"

	TypeThinkingStart              = "THINKING_START"
	TypeThinkingEnd                = "THINKING_END"
	TypeThinkingTextMessageStart   = "THINKING_TEXT_MESSAGE_START"
	TypeThinkingTextMessageContent = "THINKING_TEXT_MESSAGE_CONTENT"
	TypeThinkingTextMessageEnd     = "THINKING_TEXT_MESSAGE_END"
)

// IsKnown reports whether funduq validates events of type t. Any other
// string is relayed untouched.
func IsKnown(t string) bool {
	_, ok := schemas[t]
	return ok
}

// RunError is the terminal event funduq synthesizes for a run that failed
// without the provider's own RUN_ERROR: {"type":"RUN_ERROR","message":…},
// plus "code" when code is not empty. Compact, keys in that order.
func RunError(message, code string) json.RawMessage {
	type runError struct {
		Type    string `json:"type"`
		Message string `json:"message"`
		Code    string `json:"code,omitempty"`
	}
	out, err := encodeCompact(runError{Type: TypeRunError, Message: message, Code: code})
	if err != nil {
		// Strings always encode; this cannot happen.
		panic("agui: encoding RUN_ERROR: " + err.Error())
	}
	return out
}

// encodeCompact encodes v as compact JSON without HTML escaping and without
// the encoder's trailing newline.
func encodeCompact(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return json.RawMessage(bytes.TrimSuffix(buf.Bytes(), []byte{'\n'})), nil
}
