package handshake

import "testing"

// FuzzParseHello: any first frame a stranger sends is either a hello or a
// refusal with a reason short enough to close with — never a panic.
func FuzzParseHello(f *testing.F) {
	f.Add([]byte(`{"type":"hello","version":4,"publicKey":"29e5833a915a6429a4e3a7948475c338ef436eb82be89c92f059704403db9d55","ticket":"b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7","nonce":"c9","proof":"00","maxConcurrentRuns":1}`))
	f.Add([]byte(`{"type":"hello","version":3}`))
	f.Add([]byte(`{"type":"hello","version":4,"maxConcurrentRuns":-1}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		res, _, reason := parseHello(data)
		if reason == "" && res.PublicKey == "" {
			t.Fatalf("accepted a hello without a key: %q", data)
		}
		if len(reason) > MaxReasonBytes*4 {
			t.Fatalf("reason of %d bytes", len(reason))
		}
	})
}
