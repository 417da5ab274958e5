package a2a_test

import (
	"encoding/json"
	"testing"

	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/functions/a2a"
)

func TestParseVersion(t *testing.T) {
	for h, want := range map[string]a2a.Version{"": a2a.V03, " ": a2a.V03, "0.3": a2a.V03, "0.3.0": a2a.V03,
		"0.4": a2a.V03, "1.0": a2a.V10, "1": a2a.V10, "1.2": a2a.V10} {
		if v, ok := a2a.ParseVersion(h); !ok || v != want {
			t.Errorf("ParseVersion(%q) = %v %v, want %v", h, v, ok, want)
		}
	}
	for _, h := range []string{"0.2", "2.0", "x", "1.x", "-1.0"} {
		if v, ok := a2a.ParseVersion(h); ok {
			t.Errorf("ParseVersion(%q) = %v, want unsupported", h, v)
		}
	}
}

// Every run status maps to a task state through the one table; none
// reaches UNSPECIFIED, and only settled statuses are terminal states.
func TestStateMapping(t *testing.T) {
	for _, s := range run.All {
		st := a2a.StateOf(s)
		if st == a2a.StateUnspecified {
			t.Errorf("status %s maps to UNSPECIFIED", s)
		}
		if st.Terminal() != s.Terminal() {
			t.Errorf("status %s → %s: terminal %v vs %v", s, st.Name(a2a.V03), st.Terminal(), s.Terminal())
		}
	}
	want := map[run.Status][2]string{
		run.Queued: {"submitted", "TASK_STATE_SUBMITTED"}, run.Offering: {"submitted", "TASK_STATE_SUBMITTED"},
		run.Running: {"working", "TASK_STATE_WORKING"}, run.Cancelling: {"working", "TASK_STATE_WORKING"},
		run.InputRequired: {"input-required", "TASK_STATE_INPUT_REQUIRED"},
		run.Completed:     {"completed", "TASK_STATE_COMPLETED"}, run.Failed: {"failed", "TASK_STATE_FAILED"},
		run.Cancelled: {"canceled", "TASK_STATE_CANCELED"},
	}
	for s, names := range want {
		st := a2a.StateOf(s)
		if st.Name(a2a.V03) != names[0] || st.Name(a2a.V10) != names[1] {
			t.Errorf("%s → %s/%s, want %v", s, st.Name(a2a.V03), st.Name(a2a.V10), names)
		}
	}
}

func TestParseRequest(t *testing.T) {
	cases := map[string]int{
		`{`:  a2a.CodeParseError,
		``:   a2a.CodeParseError,
		`[]`: a2a.CodeInvalidRequest,
		`[{"jsonrpc":"2.0","id":1,"method":"tasks/get"}]`: a2a.CodeInvalidRequest,
		`"x"`:                           a2a.CodeInvalidRequest,
		`{"id":1,"method":"tasks/get"}`: a2a.CodeInvalidRequest,
		`{"jsonrpc":"1.0","id":1,"method":"tasks/get"}`:              a2a.CodeInvalidRequest,
		`{"jsonrpc":"2.0","id":1,"method":5}`:                        a2a.CodeInvalidRequest,
		`{"jsonrpc":"2.0","id":{},"method":"tasks/get"}`:             a2a.CodeInvalidRequest,
		`{"jsonrpc":"2.0","method":"tasks/get"}`:                     a2a.CodeInvalidRequest,
		`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":[1]}`: a2a.CodeInvalidParams,
		`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":"x"}`: a2a.CodeInvalidParams,
	}
	for body, code := range cases {
		_, e := a2a.ParseRequest([]byte(body))
		if e == nil || e.Code != code {
			t.Errorf("ParseRequest(%s) = %v, want %d", body, e, code)
		}
	}
	req, e := a2a.ParseRequest([]byte(`{"jsonrpc":"2.0","id":"a-1","method":"tasks/get","params":{"id":"x"}}`))
	if e != nil || string(req.ID) != `"a-1"` || req.Method != "tasks/get" || string(req.Params) != `{"id":"x"}` {
		t.Errorf("ParseRequest ok = %+v %v", req, e)
	}
}

func TestMethodTable(t *testing.T) {
	seen := map[string]bool{}
	for _, m := range a2a.Methods {
		for _, n := range []string{m.V03, m.V10} {
			if n != "" && seen[n] {
				t.Errorf("method name %s twice", n)
			}
			seen[n] = true
		}
		if !m.Served && m.Refusal == 0 {
			t.Errorf("%s neither served nor refused", m.V10)
		}
	}
	if _, ok := a2a.LookupMethod(a2a.V03, "SendMessage"); ok {
		t.Error("a v1.0 name served under 0.3")
	}
	if m, ok := a2a.LookupMethod(a2a.V10, "ListTasks"); !ok || !m.Served {
		t.Error("ListTasks not served under 1.0")
	}
}

func TestParseSendParams(t *testing.T) {
	p, e := a2a.ParseSendParams(json.RawMessage(`{"message":{"messageId":"m","role":"ROLE_AGENT","parts":[{"text":"a"},{"kind":"text","text":"b"},{"type":"text","text":"c"}]},"configuration":{"blocking":false}}`))
	if e != nil || p.Message.Text != "abc" || p.Message.Role != "assistant" || p.Blocking {
		t.Fatalf("%+v %v", p, e)
	}
	_, e = a2a.ParseSendParams(json.RawMessage(`{"message":{"messageId":"m","role":"user","parts":[{"kind":"file","file":{}},{"data":{}}]}}`))
	if e == nil || e.Code != a2a.CodeContentTypeNotSupported {
		t.Fatalf("file part: %v", e)
	}
	for _, bad := range []string{`{}`, `{"message":{}}`, `{"message":{"messageId":"m","role":"user","parts":[]}}`,
		`{"message":{"messageId":"","role":"user","parts":[{"text":"x"}]}}`, `{"message":{"messageId":"m","parts":[{"text":"x"}]}}`,
		`{"message":{"messageId":"m","role":"user","parts":[{"text":"x"}]},"metadata":[]}`,
		`{"message":{"messageId":"m","role":"user","parts":[{"text":"x"}]},"configuration":{"historyLength":-1}}`} {
		if _, e := a2a.ParseSendParams(json.RawMessage(bad)); e == nil || e.Code != a2a.CodeInvalidParams {
			t.Errorf("%s: %v", bad, e)
		}
	}
}

// FuzzParseJSONRPC: the parser never panics, and what it accepts is a
// request with a string or number id, a method and object params.
func FuzzParseJSONRPC(f *testing.F) {
	for _, s := range []string{`{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{}}}`,
		`{"jsonrpc":"2.0","id":"x","method":"GetTask"}`, `[]`, `{`, `{"jsonrpc":"2.0","id":null,"method":""}`,
		`{"jsonrpc":"2.0","id":1e400,"method":"m"}`, "\x00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		req, e := a2a.ParseRequest(b)
		if !json.Valid(req.ID) {
			t.Fatalf("id %q is not JSON", req.ID)
		}
		if e != nil {
			return
		}
		if req.Method == "" || len(req.Params) == 0 || req.Params[0] != '{' || string(req.ID) == "null" {
			t.Fatalf("accepted %+v", req)
		}
		if _, e := a2a.ParseSendParams(req.Params); e != nil && e.Code != a2a.CodeInvalidParams && e.Code != a2a.CodeContentTypeNotSupported {
			t.Fatalf("send params error %d", e.Code)
		}
	})
}
