package handshake

import "testing"

// A hello two JSON readers could read differently is not a hello: a
// repeated publicKey (whose would the proof be checked under?), invalid
// UTF-8, deep nesting.
func TestParseHelloRefusesAmbiguousFrames(t *testing.T) {
	const k1 = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
	const k2 = "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c"
	rest := `"version":4,"ticket":"00000000000000000000000000000000","nonce":"` + k1 + `","proof":"x"`
	for name, frame := range map[string]string{
		"repeated publicKey": `{"type":"hello","publicKey":"` + k1 + `","publicKey":"` + k2 + `",` + rest + `}`,
		"repeated type":      `{"type":"hello","type":"hello","publicKey":"` + k1 + `",` + rest + `}`,
		"invalid UTF-8":      "{\"type\":\"hello\",\"publicKey\":\"" + k1 + "\",\"x\":\"\xff\"," + rest + "}",
		"deep nesting":       `{"type":"hello","publicKey":"` + k1 + `","x":[[[[[[[[[[]]]]]]]]]],` + rest + `}`,
	} {
		if _, _, reason := parseHello([]byte(frame)); reason != reasonNotHello {
			t.Errorf("%s: reason %q, want %q", name, reason, reasonNotHello)
		}
	}
}
