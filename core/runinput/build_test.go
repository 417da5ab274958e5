package runinput_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/runinput"
)

func seed(b byte) string { return strings.Repeat(fmt.Sprintf("%02x", b), 32) }

func signer(t *testing.T, b byte) *identity.Signer {
	t.Helper()
	s, err := identity.NewSignerFromSeedHex(seed(b))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func ids() func() string {
	n := 0
	return func() string { n++; return fmt.Sprintf("msg_%024d", n) }
}

func baseRequest() runinput.Request {
	return runinput.Request{
		ThreadID: "thread_000000000000000000000001",
		RunID:    "run_000000000000000000000001",
		State:    json.RawMessage(`{"step": 1}`),
		Messages: []json.RawMessage{
			json.RawMessage(`{"id":"caller-1","role":"user","content":"hi <there> & you"}`),
			json.RawMessage(`{"role":"assistant","id":"caller-2","content":null,"toolCalls":[{"id":"tc1","type":"function","function":{"name":"f","arguments":"{}"}}]}`),
			json.RawMessage(`{"id":"caller-3","role":"tool","content":"42","toolCallId":"tc1"}`),
		},
		Tools:          []json.RawMessage{json.RawMessage(`{"name":"f","description":"d","parameters":{"type":"object"}}`)},
		ForwardedProps: json.RawMessage(`{"z": 1, "funduq": {"forged": true}, "a": [1, 2]}`),
		NewMessageID:   ids(),
	}
}

// Without a chain or a KYOK grant: the caller's bag minus its "funduq" key,
// every RunAgentInput key present, messages renamed and laid out per role.
const wantPlain = `{"threadId":"thread_000000000000000000000001","runId":"run_000000000000000000000001","parentRunId":null,"state":{"step":1},"messages":[{"id":"msg_000000000000000000000001","role":"user","content":"hi <there> & you","name":null,"encryptedValue":null},{"id":"msg_000000000000000000000002","role":"assistant","content":null,"name":null,"encryptedValue":null,"toolCalls":[{"id":"tc1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"id":"msg_000000000000000000000003","role":"tool","content":"42","toolCallId":"tc1","error":null,"encryptedValue":null}],"tools":[{"name":"f","description":"d","parameters":{"type":"object"}}],"context":[],"forwardedProps":{"z":1,"a":[1,2]},"resume":null}`

func TestBuildWithoutChainOrKyok(t *testing.T) {
	b, err := runinput.Build(baseRequest())
	if err != nil {
		t.Fatal(err)
	}
	if string(b.Bytes) != wantPlain {
		t.Fatalf("bytes:\n got %s\nwant %s", b.Bytes, wantPlain)
	}
	if len(b.MessageIDs) != 3 || b.MessageIDs[0] != "msg_000000000000000000000001" {
		t.Fatalf("message ids %v", b.MessageIDs)
	}
	if b.RelayedChain != nil {
		t.Fatal("a chain appeared from nowhere")
	}
}

func TestBuildWithChainAndKyok(t *testing.T) {
	caller, funduq, provider := signer(t, 0xa5), signer(t, 0xb6), signer(t, 0xe1)
	hop, err := identity.SignHop(caller, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	chain, err := identity.VerifyChain([]string{hop.Token})
	if err != nil {
		t.Fatal(err)
	}
	req := baseRequest()
	req.Chain = &chain
	req.Dispatch = runinput.Dispatch{Funduq: funduq, ProviderKey: provider.PublicKeyHex(), AgentName: "translator"}
	req.KyokToken = "a2t0LXZlY3Rvci1ib2R5.0000000000000000000000000000000000000000000000000000000000000000"
	req.ParentRunID = "run_00000000000000000000000a"
	b, err := runinput.Build(req)
	if err != nil {
		t.Fatal(err)
	}
	// The relayed chain is the contract vector's delivered-run chain: the
	// caller's hop and funduq's dispatch hop to (e1…'s key, translator).
	const hop0 = "eyJhbGciOiJFZERTQSIsInR5cCI6IkpXVCJ9.eyJhY3RvclB1YmxpY0tleSI6IjI5ZTU4MzNhOTE1YTY0MjlhNGUzYTc5NDg0NzVjMzM4ZWY0MzZlYjgyYmU4OWM5MmYwNTk3MDQ0MDNkYjlkNTUiLCJwcmV2SGFzaCI6bnVsbH0.UdDNsBBdWnD09-_qQoH1SYv-APhcYZUCJS6gGml2YakXq-I3pLsHBn4zDmG0MZTFVLfZnEOj5XNiD_dTHPkLBg"
	const hop1 = "eyJhbGciOiJFZERTQSIsInR5cCI6IkpXVCJ9.eyJhY3RvclB1YmxpY0tleSI6IjgwNTQ0MGVlNDgwNTFmYzgyZWE2NGQ5MDVhY2FiZmYwZDIxNzgwZjdmY2FiYTY5MDBlMGU0MTM4N2IxZDRhNTciLCJwcmV2SGFzaCI6ImUxYTliMmVhNjQ3ZWExNzFjOTNkMjhkMTc0ZmI0MzY0N2Q2ZGU1YmUyZmJiZWI4Y2RhYWNiN2IxY2Y0ZGUwM2QiLCJkaXNwYXRjaGVkVG8iOnsicHJvdmlkZXJLZXkiOiIyNWZjMzJjNDc4YTVhNGY4NGU0NTU3YTAzNDJlMDgyNzhjODgzNjQxYjYxNDliZGIwYjRhOTg2YWI2YzJjYjc4IiwibmFtZSI6InRyYW5zbGF0b3IifX0.diOeTiS2WvTiBEDPr_ZkpUBpfh0D_RFhR7UvHHnkvCROhWVsJEcTW7J1eTM3ZI64HQ8c4SSytmfwLK2USHq-DQ"
	want := strings.Replace(wantPlain, `"parentRunId":null`, `"parentRunId":"run_00000000000000000000000a"`, 1)
	want = strings.Replace(want, `"forwardedProps":{"z":1,"a":[1,2]}`,
		`"forwardedProps":{"z":1,"a":[1,2],"funduq":{"caller":{"headKey":"29e5833a915a6429a4e3a7948475c338ef436eb82be89c92f059704403db9d55","presenterKey":"29e5833a915a6429a4e3a7948475c338ef436eb82be89c92f059704403db9d55","hops":1},"actorChain":["`+hop0+`","`+hop1+`"],"kyok":{"token":"a2t0LXZlY3Rvci1ib2R5.0000000000000000000000000000000000000000000000000000000000000000"}}}`, 1)
	if string(b.Bytes) != want {
		t.Fatalf("bytes:\n got %s\nwant %s", b.Bytes, want)
	}
	if _, err := identity.VerifyChain(b.RelayedChain); err != nil {
		t.Fatalf("relayed chain does not verify: %v", err)
	}
}

func TestBuildIsDeterministic(t *testing.T) {
	a, _ := runinput.Build(baseRequest())
	b, _ := runinput.Build(baseRequest())
	if string(a.Bytes) != string(b.Bytes) {
		t.Fatal("same request, different bytes")
	}
}

func TestForwardedPropsShapes(t *testing.T) {
	for _, tc := range []struct {
		name, caller, kyok, want string
	}{
		{"absent", ``, "", `null`},
		{"null", `null`, "", `null`},
		{"scalar passes through", `"hello"`, "", `"hello"`},
		{"array passes through", `[1,{"funduq":2}]`, "", `[1,{"funduq":2}]`},
		{"only funduq key", `{"funduq":1}`, "", `{}`},
		{"scalar replaced when funduq adds", `7`, "tok", `{"funduq":{"kyok":{"token":"tok"}}}`},
		{"null replaced when funduq adds", `null`, "tok", `{"funduq":{"kyok":{"token":"tok"}}}`},
		{"caller funduq key replaced", `{"funduq":{"kyok":{"token":"forged"}},"x":1}`, "tok", `{"x":1,"funduq":{"kyok":{"token":"tok"}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := runinput.Request{ThreadID: "t", RunID: "r", ForwardedProps: json.RawMessage(tc.caller), KyokToken: tc.kyok}
			b, err := runinput.Build(req)
			if err != nil {
				t.Fatal(err)
			}
			if string(b.Input.ForwardedProps) != tc.want {
				t.Fatalf("forwardedProps = %s, want %s", b.Input.ForwardedProps, tc.want)
			}
		})
	}
}

func TestBuildRefusesBadInput(t *testing.T) {
	for name, mut := range map[string]func(*runinput.Request){
		"message not an object":  func(r *runinput.Request) { r.Messages = []json.RawMessage{json.RawMessage(`[]`)} },
		"message without role":   func(r *runinput.Request) { r.Messages = []json.RawMessage{json.RawMessage(`{"content":"x"}`)} },
		"tool not an object":     func(r *runinput.Request) { r.Tools = []json.RawMessage{json.RawMessage(`"f"`)} },
		"state not json":         func(r *runinput.Request) { r.State = json.RawMessage(`{`) },
		"forwardedProps garbage": func(r *runinput.Request) { r.ForwardedProps = json.RawMessage(`{"a":}`) },
	} {
		req := baseRequest()
		mut(&req)
		if _, err := runinput.Build(req); !errors.Is(err, runinput.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
}

// The builder relays a caller's message and bag as they were written or
// refuses them: it decodes their top-level keys (to lay a message out, to
// strip the bag's "funduq"), and Go reads a lone surrogate escape as
// U+FFFD, so {"\ud800":1} would be offered as {"\ufffd":1}, a key the
// caller never sent. What funduq cannot carry (a lone surrogate escape, an
// escaped NUL, a number past PostgreSQL's numeric: strictjson.Unstorable),
// in a key or a value, is ErrInvalid naming the reason — in the state,
// tools, context and resume too, which are relayed as sent; an escaped
// pair is a character like any other.
func TestBuildRefusesWhatItCannotCarry(t *testing.T) {
	msg := func(s string) func(*runinput.Request) {
		return func(r *runinput.Request) { r.Messages = []json.RawMessage{json.RawMessage(s)} }
	}
	for _, tc := range []struct {
		name, why string
		mut       func(*runinput.Request)
	}{
		{"a message key", "surrogate", msg(`{"id":"x","role":"user","content":"hi","\ud800":1}`)},
		{"a message key, low half", "surrogate", msg(`{"id":"x","role":"user","content":"hi","a\udc00":1}`)},
		{"a message value", "surrogate", msg(`{"id":"x","role":"user","content":"a\ud800b"}`)},
		{"a nested message key", "surrogate", msg(`{"id":"x","role":"user","content":"hi","x":{"\ud800":1}}`)},
		{"a message NUL", "NUL", msg(`{"id":"x","role":"user","content":"a\u0000b"}`)},
		{"a message number", "numeric", msg(`{"id":"x","role":"user","content":"hi","n":1e999999}`)},
		{"a bag key", "surrogate", func(r *runinput.Request) { r.ForwardedProps = json.RawMessage(`{"\ud800":1}`) }},
		{"a state key", "surrogate", func(r *runinput.Request) { r.State = json.RawMessage(`{"\ud800":1}`) }},
		{"a state number", "numeric", func(r *runinput.Request) { r.State = json.RawMessage(`{"n":1e999999}`) }},
		{"a tool value", "NUL", func(r *runinput.Request) { r.Tools = []json.RawMessage{json.RawMessage(`{"name":"a\u0000"}`)} }},
		{"a context key", "surrogate", func(r *runinput.Request) { r.Context = []json.RawMessage{json.RawMessage(`{"\udc00":"v"}`)} }},
		{"a resume payload", "surrogate", func(r *runinput.Request) {
			r.Resume = json.RawMessage(`[{"interruptId":"i","status":"resolved","payload":"\ud800"}]`)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := baseRequest()
			tc.mut(&req)
			b, err := runinput.Build(req)
			if !errors.Is(err, runinput.ErrInvalid) || !strings.Contains(err.Error(), tc.why) {
				t.Fatalf("built %s (err %v), want ErrInvalid naming the %s", b.Bytes, err, tc.why)
			}
		})
	}
	req := baseRequest()
	req.Messages = []json.RawMessage{json.RawMessage(`{"id":"x","role":"user","content":"\ud83d\ude00","\ud83d\ude00":1}`)}
	req.ForwardedProps = json.RawMessage(`{"\ud83d\ude00":2}`)
	b, err := runinput.Build(req)
	if err != nil {
		t.Fatal(err)
	}
	var in struct {
		Messages       []map[string]any `json:"messages"`
		ForwardedProps map[string]any   `json:"forwardedProps"`
	}
	if err := json.Unmarshal(b.Bytes, &in); err != nil {
		t.Fatal(err)
	}
	if m := in.Messages[0]; m["content"] != "\U0001F600" || m["\U0001F600"] != float64(1) || in.ForwardedProps["\U0001F600"] != float64(2) {
		t.Fatalf("built %s, want the pair kept as the same character", b.Bytes)
	}
}

func FuzzBuild(f *testing.F) {
	f.Add([]byte(`{"id":"x","role":"user","content":"hi"}`), []byte(`{"a":1,"funduq":2}`))
	f.Add([]byte(`{"role":"tool"}`), []byte(`null`))
	f.Add([]byte(`{}`), []byte(`[`))
	f.Fuzz(func(t *testing.T, msg, props []byte) {
		b, err := runinput.Build(runinput.Request{ThreadID: "t", RunID: "r",
			Messages: []json.RawMessage{msg}, ForwardedProps: props, KyokToken: "k"})
		if err != nil {
			return
		}
		var in map[string]json.RawMessage
		if err := json.Unmarshal(b.Bytes, &in); err != nil {
			t.Fatalf("built invalid JSON %q: %v", b.Bytes, err)
		}
		if len(in) != 9 {
			t.Fatalf("built %d keys, want all 9", len(in))
		}
		var fp map[string]json.RawMessage
		if err := json.Unmarshal(in["forwardedProps"], &fp); err != nil || fp["funduq"] == nil {
			t.Fatalf("funduq additions missing from %s", in["forwardedProps"])
		}
	})
}
