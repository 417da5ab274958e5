package kyok_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/funduq/funduq-go/core/kyok"
)

func TestParseOptIn(t *testing.T) {
	o, ok, err := kyok.ParseOptIn(json.RawMessage(`{"a":1,"kyok":{"llmProvider":{"providerKey":"k","name":"gpt-4"},"context":{"voucher":"v-1"}}}`))
	if err != nil || !ok || o.LLMProvider != (kyok.Ref{ProviderKey: "k", Name: "gpt-4"}) || string(o.Context) != `{"voucher":"v-1"}` {
		t.Fatalf("%+v %v %v", o, ok, err)
	}
	for _, bag := range []string{``, `null`, `[]`, `"kyok"`, `{}`, `{"kyok":"gpt-4"}`, `{"kyok":{"llmProvider":"x"}}`,
		`{"kyok":{"llmProvider":{"name":"gpt-4"}}}`, `{"kyok":{"llmProvider":{"providerKey":"k","name":""}}}`,
		`{"kyok":{"llmProvider":{"providerKey":1,"name":"n"}}}`} {
		if _, ok, err := kyok.ParseOptIn(json.RawMessage(bag)); ok || err != nil {
			t.Errorf("%s: ok=%v err=%v, want no opt-in", bag, ok, err)
		}
	}
	if _, _, err := kyok.ParseOptIn(json.RawMessage(`{"kyok":`)); err == nil {
		t.Error("a bag that is not JSON must be an error")
	}
}

func TestStripContext(t *testing.T) {
	in := `{"z":1, "kyok":{"context":{"secret":"s3"},"llmProvider":{"providerKey":"k","name":"n"}},"a":[1, 2]}`
	got := string(kyok.StripContext(json.RawMessage(in)))
	if want := `{"z":1,"kyok":{"llmProvider":{"providerKey":"k","name":"n"}},"a":[1, 2]}`; got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	for _, same := range []string{`{"a":1}`, `[1]`, `{"kyok":"x"}`, `not json`} {
		if got := string(kyok.StripContext(json.RawMessage(same))); got != same {
			t.Errorf("%s changed to %s", same, got)
		}
	}
}

func TestSealOpen(t *testing.T) {
	b := kyok.Binding{LLMProviderKey: "k", LLMName: "gpt-4", Context: json.RawMessage(`{"voucher":"v-1"}`)}
	sealed, err := kyok.Seal([]byte("secret"), b)
	if err != nil {
		t.Fatal(err)
	}
	if json.Valid(sealed) || containsBytes(sealed, "voucher") {
		t.Fatal("sealed binding is readable")
	}
	got, err := kyok.Open([]byte("secret"), sealed)
	if err != nil || got.LLMProviderKey != "k" || got.LLMName != "gpt-4" || string(got.Context) != `{"voucher":"v-1"}` {
		t.Fatalf("%+v %v", got, err)
	}
	if _, err := kyok.Open([]byte("other"), sealed); !errors.Is(err, kyok.ErrSealed) {
		t.Fatalf("another secret opened it: %v", err)
	}
	sealed[len(sealed)-1] ^= 1
	if _, err := kyok.Open([]byte("secret"), sealed); !errors.Is(err, kyok.ErrSealed) {
		t.Fatalf("a tampered binding opened: %v", err)
	}
	if _, err := kyok.Seal(nil, b); err == nil {
		t.Fatal("sealed without a secret")
	}
}

func containsBytes(b []byte, s string) bool {
	for i := 0; i+len(s) <= len(b); i++ {
		if string(b[i:i+len(s)]) == s {
			return true
		}
	}
	return false
}

func TestDropNulls(t *testing.T) {
	got := string(kyok.DropNulls(json.RawMessage(`{"b":null,"a":{"x":null,"y":[null,{"z":null}]},"c":1}`)))
	if want := `{"a":{"y":[null,{}]},"c":1}`; got != want {
		t.Fatalf("got %s want %s", got, want)
	}
}

// content is m's content, "<null>" for none.
func content(m kyok.CompletionMessage) string {
	if m.Content == nil {
		return "<null>"
	}
	return *m.Content
}

func TestCollapse(t *testing.T) {
	chunks := []json.RawMessage{
		json.RawMessage(`{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":1,"delta":{"content":"B"},"finish_reason":null},{"index":0,"delta":{"role":"assistant","content":"A"},"finish_reason":null}]}`),
		json.RawMessage(`{"id":"c2","object":"chat.completion.chunk","created":8,"model":"x","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"length"},{"index":1,"delta":{"content":"b"},"finish_reason":null}]}`),
	}
	c := kyok.Collapse(chunks, "fb", "fm", 99)
	if c.ID != "c1" || c.Created != 7 || c.Model != "m" || len(c.Choices) != 2 ||
		content(c.Choices[0].Message) != "Aa" || c.Choices[0].FinishReason != "length" ||
		content(c.Choices[1].Message) != "Bb" || c.Choices[1].FinishReason != "stop" || c.Choices[1].Message.Role != "assistant" {
		t.Fatalf("%+v", c)
	}
	e := kyok.Collapse(nil, "fb", "fm", 99)
	if e.ID != "fb" || len(e.Choices) != 1 || content(e.Choices[0].Message) != "" || e.Choices[0].FinishReason != "stop" {
		t.Fatalf("%+v", e)
	}
}

// A model's refusal and its tool calls stream as deltas of their own;
// the collapsed answer keeps them as OpenAI's non-streamed message holds
// them: refusal a string or null, tool calls merged by their index, each
// call's arguments concatenated.
func TestCollapseKeepsRefusalAndToolCalls(t *testing.T) {
	chunks := []json.RawMessage{
		json.RawMessage(`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","refusal":"I can't "}},{"index":1,"delta":{"role":"assistant","tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"get","arguments":"{\"q\":"}}]}}]}`),
		json.RawMessage(`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"refusal":"help."},"finish_reason":"stop"},{"index":1,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"1}"}},{"index":1,"id":"call_b","type":"function","function":{"name":"put","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}`),
	}
	got, err := json.Marshal(kyok.Collapse(chunks, "fb", "fm", 99))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Choices []struct {
			Message map[string]json.RawMessage
		}
	}
	if err := json.Unmarshal(got, &c); err != nil || len(c.Choices) != 2 {
		t.Fatalf("%s: %v", got, err)
	}
	refused, called := c.Choices[0].Message, c.Choices[1].Message
	// No content streamed beside them: content null, as OpenAI answers.
	if string(refused["refusal"]) != `"I can't help."` || string(refused["content"]) != "null" || refused["tool_calls"] != nil {
		t.Errorf("the refusing choice collapsed to %s", got)
	}
	want := `[{"id":"call_a","type":"function","function":{"name":"get","arguments":"{\"q\":1}"}},{"id":"call_b","type":"function","function":{"name":"put","arguments":"{}"}}]`
	if string(called["refusal"]) != "null" || string(called["content"]) != "null" || string(called["tool_calls"]) != want {
		t.Errorf("the calling choice collapsed to %s\nwant tool_calls %s", got, want)
	}
}

func TestValidate(t *testing.T) {
	if err := kyok.ValidateChatRequest([]byte(`{"model":"gpt-4","messages":[{"role":"user","content":"hi"}],"x-ext":1}`)); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{`[]`, `{"messages":[{"role":"user"}]}`, `{"model":"m"}`, `{"model":"m","messages":[]}`, `{"model":"m","messages":[1]}`} {
		if err := kyok.ValidateChatRequest([]byte(bad)); !errors.Is(err, kyok.ErrNotChatRequest) {
			t.Errorf("%s: %v", bad, err)
		}
	}
	if err := kyok.ValidateChunk([]byte(`{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{}}]}`)); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{`"s"`, `{"id":"c","created":1,"model":"m"}`, `{"id":"c","created":1,"model":"m","choices":[{"delta":{}}]}`,
		// What a collapse reads must be as typed: a refusal, a tool call's arguments.
		`{"id":"c","created":1,"model":"m","choices":[{"index":0,"delta":{"refusal":7}}]}`,
		`{"id":"c","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":{"q":1}}}]}}]}`} {
		if kyok.ValidateChunk([]byte(bad)) == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}
