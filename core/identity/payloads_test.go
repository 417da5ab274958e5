package identity

import (
	"errors"
	"slices"
	"testing"
	"time"
)

func TestPayloads(t *testing.T) {
	body := []byte(`{"model":"gpt-4","messages":[{"role":"user","content":"hi"}]}`)
	for _, tc := range []struct {
		name string
		got  []byte
		want string
	}{
		{"provider-connect", ProviderConnectPayload(testKeyB6, "t1", "n1"), "funduq-connect-provider:" + testKeyB6 + ":t1:n1"},
		{"provider-connect identity-less", ProviderConnectPayload("", "t1", "n1"), "funduq-connect-provider::t1:n1"},
		{"funduq-connect", FunduqConnectPayload("t1", "n1"), "funduq-connect-funduq:t1:n1"},
		{"kyok-call", KyokCallPayload("tok", 1755500000, body), "funduq-kyok-call:tok:1755500000:aafe81911c246dac10c95e15f6e50babce5f562d691953e0185c372e973940e1"},
		{"cancel", CancelPayload("run-1", 7), "funduq-cancel:run-1:7"},
		{"view", ViewPayload("run-1", -7), "funduq-view:run-1:-7"},
		{"resolution empty", ResolutionPayload("r", nil), "funduq-resolve:r:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
		{"resolution order-free", ResolutionPayload("run_2c26b46b68ffc68ff99b453c", []string{"int_1", "tool_b"}),
			"funduq-resolve:run_2c26b46b68ffc68ff99b453c:7fe8c2f35c4b4073ddbdade92c50c48641b6e046354de48ebbab73ef638c7c54"},
		{"resolution one", ResolutionPayload("r", []string{"a"}), "funduq-resolve:r:" + SHA256Hex([]byte("a"))},
		{"resolution NUL join bytewise", ResolutionPayload("r", []string{"b", "B", "a"}), "funduq-resolve:r:" + SHA256Hex([]byte("B\x00a\x00b"))},
		{"presenter", PresenterPayload(testKeyA5, 1755500000, nil),
			"funduq-server-presenter:" + testKeyA5 + ":1755500000:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if string(tc.got) != tc.want {
				t.Fatalf("\n got  %q\n want %q", tc.got, tc.want)
			}
		})
	}
}

func TestResolutionPayloadLeavesInputAlone(t *testing.T) {
	ids := []string{"tool_b", "int_1"}
	ResolutionPayload("r", ids)
	if !slices.Equal(ids, []string{"tool_b", "int_1"}) {
		t.Fatalf("input reordered: %v", ids)
	}
}

// A worked v4 handshake between the test keys a5 (provider) and b6 (funduq)
// (design.md §The provider wire); its expected values are not among the
// vectors in testdata/reference/.
func TestWorkedHandshakeExample(t *testing.T) {
	provider, funduq := signerOf(t, "a5"), signerOf(t, "b6")
	if funduq.PublicKeyHex() != testKeyB6 {
		t.Fatalf("b6 key = %s", funduq.PublicKeyHex())
	}
	ticket, nonce := "b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7b7", "c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9c9"
	proof := provider.Sign(ProviderConnectPayload(funduq.PublicKeyHex(), ticket, nonce))
	if proof != "3e1e9a69c905cdd2e050bf19d8c938f903be2475b7468b76833bfe8d72ad34897a1d163511c8a53312d8f846fd636ed424e33773d28fd6eb7feadc4b903d2907" {
		t.Fatalf("proof = %s", proof)
	}
	answer := funduq.Sign(FunduqConnectPayload(ticket, nonce))
	if answer != "270bbbfd5f0bc65429b5a075fa8a238ccd9d26a3f2ee51c30429ed908dd72d738a4e7383b7a37a3a2d9aeffb40b83b70b2a923b9d1cf59cb3ec8a302ac7c4909" {
		t.Fatalf("answer = %s", answer)
	}
	// A proof made for another funduq does not verify with this funduq as recipient.
	if err := Verify(provider.PublicKey(), ProviderConnectPayload(testKeyA5, ticket, nonce), proof); !errors.Is(err, ErrBadSignature) {
		t.Fatalf("relayed proof: err = %v", err)
	}
}

func TestCheckFresh(t *testing.T) {
	now := time.Unix(1755500000, 0)
	half := now.Add(500 * time.Millisecond)
	for _, tc := range []struct {
		name  string
		ts    int64
		now   time.Time
		fresh bool
	}{
		{"now", 1755500000, now, true},
		{"60s old", 1755500000 - 60, now, true},
		{"60s ahead", 1755500000 + 60, now, true},
		{"61s old", 1755500000 - 61, now, false},
		{"61s ahead", 1755500000 + 61, now, false},
		{"60.5s old at sub-second now", 1755500000 - 60, half, false},
		{"59.5s ahead at sub-second now", 1755500000 + 60, half, true},
		{"zero", 0, now, false},
		{"max int64", 1<<63 - 1, now, false},
		{"min int64", -1 << 63, now, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckFresh(tc.ts, tc.now, FreshnessWindow)
			if tc.fresh && err != nil {
				t.Fatalf("CheckFresh = %v, want fresh", err)
			}
			if !tc.fresh && !errors.Is(err, ErrStale) {
				t.Fatalf("CheckFresh = %v, want ErrStale", err)
			}
		})
	}
}
