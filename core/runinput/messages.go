package runinput

import (
	"encoding/json"
	"fmt"

	"github.com/funduq/funduq-go/core/strictjson"
)

// canonicalKeys lists, per AG-UI role, the keys a message is emitted with,
// in order, each present even when null: a strict provider validates a
// message against its model and refuses one with a key missing. Keys a
// caller sent beyond these follow, in the caller's order.
var canonicalKeys = map[string][]string{
	"user":      {"id", "role", "content", "name", "encryptedValue"},
	"system":    {"id", "role", "content", "name", "encryptedValue"},
	"developer": {"id", "role", "content", "name", "encryptedValue"},
	"assistant": {"id", "role", "content", "name", "encryptedValue", "toolCalls"},
	"tool":      {"id", "role", "content", "toolCallId", "error", "encryptedValue"},
}

// NormalizeMessage returns the AG-UI message raw with its id replaced by id
// and its keys laid out canonically for its role. A message of a role this
// version does not know keeps its own keys after id and role.
//
// A message holding what funduq cannot carry (strictjson.Unstorable: a
// lone surrogate escape, an escaped NUL, a number past PostgreSQL's
// numeric), in a key or a value, is an error, never rewritten: its keys
// are decoded here, and Go reads a lone surrogate as U+FFFD, so such a
// key would reach the provider as one the caller never sent.
func NormalizeMessage(raw json.RawMessage, id string) (json.RawMessage, error) {
	if why := strictjson.Unstorable(raw); why != "" {
		return nil, fmt.Errorf("message %s (in a key or a value), which funduq does not carry", why)
	}
	obj, err := parseObject(raw)
	if err != nil {
		return nil, fmt.Errorf("message: %w", err)
	}
	roleRaw, _ := obj.get("role")
	var role string
	if err := json.Unmarshal(roleRaw, &role); err != nil || role == "" {
		return nil, fmt.Errorf("message: role must be a non-empty string")
	}
	idRaw, _ := marshal(id)
	keys, known := canonicalKeys[role]
	if !known {
		keys = []string{"id", "role"}
	}
	out := make(object, 0, len(obj)+len(keys))
	for _, k := range keys {
		v, ok := obj.get(k)
		if k == "id" {
			v, ok = idRaw, true
		}
		if !ok {
			v = json.RawMessage("null")
		}
		out = append(out, member{k, v})
	}
	for _, m := range obj {
		if _, dup := out.get(m.Key); !dup {
			out = append(out, m)
		}
	}
	return out.MarshalJSON()
}
