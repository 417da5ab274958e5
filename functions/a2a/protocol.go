package a2a

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Version is an A2A protocol version the door speaks.
type Version int

const (
	V03 Version = iota + 1 // method names message/send…, lowercase states, kind discriminators
	V10                    // PascalCase methods, ProtoJSON enums, wrapped stream items
)

func (v Version) String() string {
	if v == V10 {
		return "1.0"
	}
	return "0.3"
}

// VersionHeader selects the protocol version of a request.
const VersionHeader = "A2A-Version"

// ParseVersion reads the A2A-Version header the way the A2A servers do: an
// absent or blank header is 0.3; 0.3 ≤ v < 1.0 is 0.3; 1.x is 1.0; anything
// else is not supported (VersionNotSupportedError).
func ParseVersion(h string) (Version, bool) {
	h = strings.TrimSpace(h)
	if h == "" {
		return V03, true
	}
	majS, minS, _ := strings.Cut(h, ".")
	if minS == "" {
		minS = "0"
	}
	if i := strings.IndexByte(minS, '.'); i >= 0 {
		minS = minS[:i] // a patch level is ignored
	}
	maj, err1 := strconv.Atoi(majS)
	mnr, err2 := strconv.Atoi(minS)
	if err1 != nil || err2 != nil || maj < 0 || mnr < 0 {
		return 0, false
	}
	switch {
	case maj == 0 && mnr >= 3:
		return V03, true
	case maj == 1:
		return V10, true
	}
	return 0, false
}

// Op is an A2A operation.
type Op int

const (
	OpSend Op = iota + 1
	OpStream
	OpGet
	OpCancel
	OpSubscribe
	OpList
	OpPushSet
	OpPushGet
	OpPushList
	OpPushDelete
	OpExtendedCard
)

// Method is one A2A operation's JSON-RPC names per version ("" when the
// version has none) and what the door does with it.
type Method struct {
	Op        Op
	V03       string
	V10       string
	Streaming bool
	Served    bool // false: answered with the error Refusal names
	Refusal   int  // the JSON-RPC code of a refused operation
}

// Methods is the one table of method names (checked against @a2a-js/sdk's
// own definitions by a test).
var Methods = []Method{
	{Op: OpSend, V03: "message/send", V10: "SendMessage", Served: true},
	{Op: OpStream, V03: "message/stream", V10: "SendStreamingMessage", Streaming: true, Served: true},
	{Op: OpGet, V03: "tasks/get", V10: "GetTask", Served: true},
	{Op: OpCancel, V03: "tasks/cancel", V10: "CancelTask", Served: true},
	{Op: OpSubscribe, V03: "tasks/resubscribe", V10: "SubscribeToTask", Streaming: true, Served: true},
	{Op: OpList, V10: "ListTasks", Served: true},
	{Op: OpPushSet, V03: "tasks/pushNotificationConfig/set", V10: "CreateTaskPushNotificationConfig", Refusal: CodePushNotificationNotSupported},
	{Op: OpPushGet, V03: "tasks/pushNotificationConfig/get", V10: "GetTaskPushNotificationConfig", Refusal: CodePushNotificationNotSupported},
	{Op: OpPushList, V03: "tasks/pushNotificationConfig/list", V10: "ListTaskPushNotificationConfigs", Refusal: CodePushNotificationNotSupported},
	{Op: OpPushDelete, V03: "tasks/pushNotificationConfig/delete", V10: "DeleteTaskPushNotificationConfig", Refusal: CodePushNotificationNotSupported},
	{Op: OpExtendedCard, V03: "agent/getAuthenticatedExtendedCard", V10: "GetExtendedAgentCard", Refusal: CodeUnsupportedOperation},
}

// LookupMethod finds name among v's method names.
func LookupMethod(v Version, name string) (Method, bool) {
	for _, m := range Methods {
		if (v == V03 && m.V03 == name || v == V10 && m.V10 == name) && name != "" {
			return m, true
		}
	}
	return Method{}, false
}

// JSON-RPC and A2A error codes (the A2A spec's table; @a2a-js/sdk's
// A2A_ERROR_CODE under the same names).
const (
	CodeParseError                   = -32700
	CodeInvalidRequest               = -32600
	CodeMethodNotFound               = -32601
	CodeInvalidParams                = -32602
	CodeInternalError                = -32603
	CodeTaskNotFound                 = -32001
	CodeTaskNotCancelable            = -32002
	CodePushNotificationNotSupported = -32003
	CodeUnsupportedOperation         = -32004
	CodeContentTypeNotSupported      = -32005
	CodeInvalidAgentResponse         = -32006
	CodeExtendedCardNotConfigured    = -32007
	CodeExtensionSupportRequired     = -32008
	CodeVersionNotSupported          = -32009
)

// ErrorCodes is the one table of A2A error codes, keyed like @a2a-js/sdk's
// A2A_ERROR_CODE (a test compares the two).
var ErrorCodes = map[string]int{
	"PARSE_ERROR":                     CodeParseError,
	"INVALID_REQUEST":                 CodeInvalidRequest,
	"METHOD_NOT_FOUND":                CodeMethodNotFound,
	"INVALID_PARAMS":                  CodeInvalidParams,
	"INTERNAL_ERROR":                  CodeInternalError,
	"TASK_NOT_FOUND":                  CodeTaskNotFound,
	"TASK_NOT_CANCELABLE":             CodeTaskNotCancelable,
	"PUSH_NOTIFICATION_NOT_SUPPORTED": CodePushNotificationNotSupported,
	"UNSUPPORTED_OPERATION":           CodeUnsupportedOperation,
	"CONTENT_TYPE_NOT_SUPPORTED":      CodeContentTypeNotSupported,
	"INVALID_AGENT_RESPONSE":          CodeInvalidAgentResponse,
	"EXTENDED_CARD_NOT_CONFIGURED":    CodeExtendedCardNotConfigured,
	"EXTENSION_SUPPORT_REQUIRED":      CodeExtensionSupportRequired,
	"VERSION_NOT_SUPPORTED":           CodeVersionNotSupported,
}

// funduq's own refusals that A2A has no word for, in the implementation-
// defined server-error range (-32000…-32099) clear of A2A's -32001…-32009.
// Each also carries data.reason = the door error code (package door).
const (
	CodeUnauthenticated    = -32040 // presenter required, the actor chain does not verify, or a retry's presenter proof went stale (HTTP 401)
	CodeMembershipRequired = -32041 // a write to a thread bound to another authority
	CodeInvalidCancel      = -32042 // a cancel on a bound thread without a valid proof
	CodeUnavailable        = -32043 // storage unreachable (HTTP 503, Retry-After)
	CodeThreadQueueFull    = -32044 // the context has too many tasks waiting (HTTP 429, Retry-After)
	CodeInvalidResolution  = -32045 // an answer on a bound thread without a valid resolution proof
	CodeKeyReused          = -32046 // an Idempotency-Key or messageId already used for another request (HTTP 422)
	CodeMisconfigured      = -32047 // this door's identity key is not the broker's: a task with an actor chain is refused (HTTP 503)
	CodeStreamEnded        = -32048 // a stream's time is up before its task settled: the last item, saying how to resume
)

// RPCError is a JSON-RPC error object.
type RPCError struct {
	Code    int            `json:"code"`
	Message string         `json:"message"`
	Data    map[string]any `json:"data,omitempty"`
	// status is the HTTP status it is sent with (0: 200).
	status     int
	retryAfter int
}

func (e *RPCError) Error() string { return fmt.Sprintf("json-rpc %d: %s", e.Code, e.Message) }

func rpcErr(code int, format string, args ...any) *RPCError {
	return &RPCError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Request is a parsed JSON-RPC 2.0 request.
type Request struct {
	ID     json.RawMessage // the id as sent (a string or a number)
	Method string
	Params json.RawMessage // an object ({} when absent)
}

// ParseRequest reads one JSON-RPC 2.0 request. Malformed JSON is -32700; a
// well-formed body that is not a request object (a batch, no "2.0", a
// method that is not a string, an id that is not a string or number, no id)
// is -32600; params that are not an object are -32602. The id returned is
// the request's when it could be read (for the error's id), else null.
func ParseRequest(body []byte) (Request, *RPCError) {
	req := Request{ID: json.RawMessage("null")}
	if !json.Valid(body) {
		return req, rpcErr(CodeParseError, "the body is not valid JSON")
	}
	if firstByte(body) != '{' {
		return req, rpcErr(CodeInvalidRequest, "the body must be one JSON-RPC 2.0 request object (batches are not served)")
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(body, &obj); err != nil {
		return req, rpcErr(CodeInvalidRequest, "the body must be a JSON-RPC 2.0 request object")
	}
	if id, ok := obj["id"]; ok {
		switch firstByte(id) {
		case '"':
			var s string
			if json.Unmarshal(id, &s) != nil {
				return req, rpcErr(CodeInvalidRequest, "id must be a string or a number")
			}
			req.ID = compactJSON(id)
		case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			req.ID = compactJSON(id)
		default:
			if firstByte(id) != 'n' {
				return req, rpcErr(CodeInvalidRequest, "id must be a string or a number")
			}
		}
	}
	var version string
	if raw, ok := obj["jsonrpc"]; !ok || json.Unmarshal(raw, &version) != nil || version != "2.0" {
		return req, rpcErr(CodeInvalidRequest, `jsonrpc must be "2.0"`)
	}
	if raw, ok := obj["method"]; !ok || firstByte(raw) != '"' || json.Unmarshal(raw, &req.Method) != nil || req.Method == "" {
		return req, rpcErr(CodeInvalidRequest, "method must be a non-empty string")
	}
	if _, ok := obj["id"]; !ok || firstByte(obj["id"]) == 'n' {
		return req, rpcErr(CodeInvalidRequest, "id is required: every A2A method answers (notifications are not served)")
	}
	req.Params = json.RawMessage("{}")
	if raw, ok := obj["params"]; ok && firstByte(raw) != 'n' {
		if firstByte(raw) != '{' {
			return req, rpcErr(CodeInvalidParams, "params must be an object")
		}
		req.Params = raw
	}
	return req, nil
}

func compactJSON(raw []byte) json.RawMessage {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return json.RawMessage("null")
	}
	return b.Bytes()
}

func firstByte(raw []byte) byte {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return 0
	}
	return raw[0]
}

// response is a JSON-RPC response.
type response struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *RPCError       `json:"error,omitempty"`
}

func marshalResponse(id json.RawMessage, result any, e *RPCError) []byte {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	resp := response{JSONRPC: "2.0", ID: id}
	if e != nil {
		resp.Error = e
	} else {
		resp.Result = result
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(resp); err != nil {
		return []byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"internal error"}}`)
	}
	return bytes.TrimRight(buf.Bytes(), "\n")
}

// readCount reads a count param (historyLength, pageSize) the way
// ProtoJSON reads an int32, since A2A 1.0 clients encode through it: a
// JSON number with an integral value (2, 2.0, 2e0) or such a number as a
// string ("2"). Absent or null: ok is false. Negative, past the int32
// range, or anything else, it is -32602 naming the param (name), never
// another one.
func readCount(raw json.RawMessage, name string) (n int, ok bool, e *RPCError) {
	n, ok, e = readInt32(raw, name)
	if e == nil && n < 0 {
		return 0, false, rpcErr(CodeInvalidParams, "%s must not be negative", name)
	}
	return n, ok, e
}

// readInt32 is readCount allowing a negative value.
func readInt32(raw json.RawMessage, name string) (n int, ok bool, e *RPCError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || firstByte(raw) == 'n' {
		return 0, false, nil
	}
	bad := rpcErr(CodeInvalidParams, "%s must be an integer", name)
	num := raw
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return 0, false, bad
		}
		num = []byte(s)
	}
	if len(num) == 0 || num[0] != '-' && (num[0] < '0' || num[0] > '9') || !json.Valid(num) {
		return 0, false, bad
	}
	f, err := strconv.ParseFloat(string(num), 64)
	if err != nil && !math.IsInf(f, 0) || f != math.Trunc(f) {
		return 0, false, bad
	}
	if f > math.MaxInt32 || f < math.MinInt32 {
		return 0, false, rpcErr(CodeInvalidParams, "%s must be an integer of at most 32 bits", name)
	}
	return int(f), true, nil
}
