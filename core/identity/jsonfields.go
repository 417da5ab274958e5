package identity

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
)

// jsonObject decodes raw as a JSON object whose keys must all be in allowed
// (when allowed is non-nil). Keys are matched exactly: encoding/json's
// case-insensitive struct matching would let "ActorPublicKey" pass as a known
// claim where the Python verifiers see an unknown one.
func jsonObject(raw []byte, allowed ...string) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if m == nil { // the literal null
		return nil, fmt.Errorf("not a JSON object: null")
	}
	if allowed != nil {
		for _, k := range slices.Sorted(maps.Keys(m)) { // sorted: deterministic messages
			if !slices.Contains(allowed, k) {
				return nil, fmt.Errorf("unknown key %q", k)
			}
		}
	}
	return m, nil
}

// jsonString decodes a JSON string value; null, numbers and other types are
// refused (json.Unmarshal would silently leave a string unchanged on null).
func jsonString(raw json.RawMessage) (string, bool) {
	if len(raw) == 0 || raw[0] != '"' {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// jsonInt decodes a JSON integer literal into an int64. Fractions and
// exponents are refused: every integer this package reads was written as one.
func jsonInt(raw json.RawMessage) (int64, bool) {
	if len(raw) == 0 || (raw[0] != '-' && (raw[0] < '0' || raw[0] > '9')) {
		return 0, false
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	return n, err == nil
}

func isJSONNull(raw json.RawMessage) bool { return string(raw) == "null" }
