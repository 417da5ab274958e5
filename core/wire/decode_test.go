package wire_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/core/wire"
)

func TestDecodeProviderFrame(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"type":"ack","runId":"r"}`, ""},
		{`{"type":"event","runId":"r","event":{"type":"RUN_STARTED"},"seq":3}`, ""},
		{`{"type":"finish","runId":"r"}`, ""},
		{`{"type":"deleteAgent","name":"x"}`, ""},
		{`{"type":"query","queryId":"q","method":"thread_messages","params":{}}`, ""},
		{`{"type":"register","agents":[{"name":"a","description":"","takesInterjections":false}]}`, ""},
		{`not json`, "unparseable frame"},
		{`{"type":"ack"}`, "ack needs a runId"},
		{`{"type":"ack","runId":7}`, "ack needs a runId"},
		{`{"type":"event","runId":"r","seq":1e400}`, "event refused: seq is out of range"},
		{`{"type":"event","runId":"r","seq":9223372036854775808}`, "event refused: seq is out of range"},
		{`{"type":"event","runId":"r","seq":1.0}`, "event refused: seq must be an integer written without a fraction or exponent (got 1.0)"},
		{`{"type":"event","runId":"r","seq":1e0}`, "event refused: seq must be an integer written without a fraction or exponent (got 1e0)"},
		{`{"type":"event","runId":"r","seq":-0.5}`, "event refused: seq must be an integer written without a fraction or exponent (got -0.5)"},
		{`{"type":"event","runId":"r","seq":1e-400}`, "event refused: seq must be an integer written without a fraction or exponent (got 1e-400)"},
		{`{"type":"finish"}`, "finish needs a runId"},
		{`{"type":"deleteAgent"}`, "deleteAgent needs a name"},
		{`{"type":"query"}`, "query needs a queryId"},
		{`{"type":"register","agents":[],"extra":1}`, `register does not validate: unknown key "extra"`},
		{`{"type":"register","agents":[{"name":"a","bogus":1}]}`, `register does not validate: unknown key "bogus"`},
		{`{"type":"register","agents":"a"}`, `register does not validate: agents must be an array (got string)`},
		{`{"type":"register","agents":[{"name":5}]}`, `register does not validate: agents.name must be a string (got number)`},
		{`{"type":"register","agents":[{"name":"a","takesInterjections":"yes"}]}`, `register does not validate: agents.takesInterjections must be a boolean (got string)`},
		{`{"type":"register","agents":[7]}`, `register does not validate: agents must be an object (got number)`},
		{`{"type":"run"}`, "unexpected frame 'run'"},
		// Members are read by their exact names (design.md §The provider
		// wire, "Exact names"); one named like a field but not exactly is
		// refused, never read as that field.
		{`{"TYPE":"ack","runId":"r"}`, `frame refused: member "TYPE" differs from "type" only in case`},
		{`{"Type":"ack","type":null}`, `frame refused: member "Type" differs from "type" only in case`},
		{`{"type":"finish","RunId":"r"}`, `finish refused: member "RunId" differs from "runId" only in case`},
		{`{"type":"finish","RUNID":"r","runId":"r"}`, `finish refused: member "RUNID" differs from "runId" only in case`},
		{`{"type":"ack","ſeq":1,"RUNID":"r"}`, `ack refused: member "RUNID" differs from "runId" only in case`},
		{`{"type":"event","runId":"r","event":{},"ſeq":1}`, `event refused: member "ſeq" differs from "seq" only in case`},
		{`{"type":"deleteAgent","name":"a","NAME":"b"}`, `deleteAgent refused: member "NAME" differs from "name" only in case`},
		{`{"type":"query","queryId":"q","Params":{}}`, `query refused: member "Params" differs from "params" only in case`},
		{`{"type":"register","agents":[],"ProviderName":"p"}`, `register does not validate: member "ProviderName" differs from "providerName" only in case`},
		{`{"type":"register","agents":[{"name":"a"},{"name":"b","TakesInterjections":true}]}`,
			`register does not validate: agents[1] member "TakesInterjections" differs from "takesInterjections" only in case`},
	} {
		_, err := wire.DecodeProviderFrame([]byte(tc.in))
		var fe *wire.FrameError
		if tc.want == "" && err != nil || tc.want != "" && (!errors.As(err, &fe) || fe.Message != tc.want) {
			t.Errorf("%s: err %v, want %q", tc.in, err, tc.want)
		}
	}
}

// A report whose runId is readable is refused naming that run, with the
// field that is wrong; the link can then answer with the run's id.
func TestReportRefusalsNameTheRun(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"type":"ack","runId":"r1","accepted":"yes"}`, "ack refused: accepted must be a boolean (got string)"},
		{`{"type":"ack","runId":"r1","accepted":1}`, "ack refused: accepted must be a boolean (got number)"},
		{`{"type":"ack","runId":"r1","accepted":false,"reason":7}`, "ack refused: reason must be a string (got number)"},
		{`{"type":"event","runId":"r1"}`, "event refused: the frame carries no event"},
		{`{"type":"event","runId":"r1","event":null}`, "event refused: the frame carries no event"},
		{`{"type":"event","runId":"r1","event":{},"seq":"3"}`, "event refused: seq must be a number (got string)"},
		{`{"type":"event","runId":"r1","RUNID":"r2","event":{}}`, `event refused: member "RUNID" differs from "runId" only in case`},
		{`{"type":"ack","runId":"r1","Reason":"x","accepted":false}`, `ack refused: member "Reason" differs from "reason" only in case`},
	} {
		_, err := wire.DecodeProviderFrame([]byte(tc.in))
		var fe *wire.FrameError
		if !errors.As(err, &fe) || fe.Message != tc.want || fe.RunID != "r1" {
			t.Errorf("%s: %+v, want %q naming r1", tc.in, fe, tc.want)
		}
	}
}

// FuzzDecodeProviderFrame: any bytes a provider sends decode to one of the
// inbound frames or a *FrameError, never a panic, and a decoded frame
// carries the id its handler needs.
func FuzzDecodeProviderFrame(f *testing.F) {
	for _, s := range []string{`{"type":"ack","runId":"r","accepted":false,"reason":"x"}`,
		`{"type":"event","runId":"r","event":{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"d"},"seq":1}`,
		`{"type":"finish","runId":"r"}`, `{"type":"deleteAgent","name":"x"}`,
		`{"type":"query","queryId":"q","method":"thread_messages","params":{"threadId":"t","limit":2}}`,
		`{"type":"register","agents":[{"name":"a","description":"d","metadata":{},"takesInterjections":true}],"providerName":"p"}`,
		`{"type":"x"}`, `[]`, `{"type":"ack","runId":"a","type":"event"}`, `{"type":"event","runId":"a","RUNID":"b","event":{}}`,
		`{"type":"finish","RunId":"a"}`, `{"type":"register","agents":[{"NAME":"a"}]}`, `{"TYPE":"finish","runId":"a"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := wire.DecodeProviderFrame(b)
		if err != nil {
			var fe *wire.FrameError
			if !errors.As(err, &fe) || fe.Message == "" {
				t.Fatalf("error %T %v is not a FrameError", err, err)
			}
			return
		}
		// The id a handler reads is the frame's exact member, as a reader
		// matching names exactly (a map) reads it (design.md §The provider
		// wire, "Exact names").
		switch v := fr.(type) {
		case wire.Ack:
			ok(t, v.RunID != "")
			exact(t, b, "runId", v.RunID)
		case wire.Event:
			ok(t, v.RunID != "")
			exact(t, b, "runId", v.RunID)
		case wire.Finish:
			ok(t, v.RunID != "")
			exact(t, b, "runId", v.RunID)
		case wire.DeleteAgent:
			ok(t, v.Name != "")
			exact(t, b, "name", v.Name)
		case wire.Query:
			ok(t, v.QueryID != "")
			exact(t, b, "queryId", v.QueryID)
		case wire.Register:
			var m struct {
				Agents []map[string]json.RawMessage `json:"agents"`
			}
			_ = json.Unmarshal(b, &m)
			for i, a := range v.Agents {
				var name string
				_ = json.Unmarshal(a2raw(m.Agents, i, "name"), &name)
				if a.Name != name {
					t.Fatalf("agent %d decoded name %q; its exact member is %q", i, a.Name, name)
				}
			}
		default:
			t.Fatalf("decoded to %T", fr)
		}
	})
}

// FuzzDecodeKyokFrame is the same for /ws/kyok.
func FuzzDecodeKyokFrame(f *testing.F) {
	for _, s := range []string{`{"type":"register","models":["m"],"metadata":{}}`, `{"type":"deleteModel","name":"m"}`,
		`{"type":"chunk","requestId":"q","data":{"choices":[]}}`, `{"type":"done","requestId":"q"}`,
		`{"type":"error","requestId":"q","message":"no","refusal":{"code":"x"}}`, `{"type":"chunk"}`, `{}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fr, err := wire.DecodeKyokFrame(b)
		if err != nil {
			var fe *wire.FrameError
			if !errors.As(err, &fe) || fe.Message == "" {
				t.Fatalf("error %T %v is not a FrameError", err, err)
			}
			return
		}
		switch v := fr.(type) {
		case wire.Answer:
			ok(t, v.RequestID != "" && (v.Type == wire.TypeChunk || v.Type == wire.TypeDone || v.Type == wire.TypeError))
		case wire.DeleteModel:
			ok(t, v.Name != "")
		case wire.RegisterModels:
		default:
			t.Fatalf("decoded to %T", fr)
		}
	})
}

// exact fails t unless got is the string b's exact member key holds.
func exact(t *testing.T, b []byte, key, got string) {
	t.Helper()
	var m map[string]json.RawMessage
	var want string
	if json.Unmarshal(b, &m) != nil || json.Unmarshal(m[key], &want) != nil || got != want {
		t.Fatalf("decoded %s %q from %q; its exact member is %q", key, got, b, want)
	}
}

func a2raw(agents []map[string]json.RawMessage, i int, key string) json.RawMessage {
	if i >= len(agents) {
		return nil
	}
	return agents[i][key]
}

func ok(t *testing.T, cond bool) {
	t.Helper()
	if !cond {
		t.Fatal("a decoded frame lacks the id its handler needs")
	}
}

// /ws/kyok's frames are read by their exact names too.
func TestKyokFramesAreReadByExactNames(t *testing.T) {
	for raw, want := range map[string]string{
		`{"type":"register","Models":["m"]}`:                      `register does not validate: member "Models" differs from "models" only in case`,
		`{"type":"deleteModel","Name":"m"}`:                       `deleteModel refused: member "Name" differs from "name" only in case`,
		`{"type":"chunk","requestId":"q","Data":{}}`:              `chunk frame does not decode: member "Data" differs from "data" only in case`,
		`{"type":"done","RequestId":"q"}`:                         `done frame does not decode: member "RequestId" differs from "requestId" only in case`,
		`{"type":"error","requestId":"q","Message":"x"}`:          `error frame does not decode: member "Message" differs from "message" only in case`,
		`{"type":"error","requestId":"q","REFUSAL":{"code":"x"}}`: `error frame does not decode: member "REFUSAL" differs from "refusal" only in case`,
		`{"TYPE":"done","requestId":"q"}`:                         `frame refused: member "TYPE" differs from "type" only in case`,
	} {
		_, err := wire.DecodeKyokFrame([]byte(raw))
		if err == nil || err.Error() != want {
			t.Errorf("%s: %v, want %q", raw, err, want)
		}
	}
	// A member that is no field of the frame is ignored, as before: only
	// a field's case variant is refused.
	if _, err := wire.DecodeKyokFrame([]byte(`{"type":"done","requestId":"q","RunId":"r"}`)); err != nil {
		t.Errorf("a done with an unknown member: %v", err)
	}
	if _, err := wire.DecodeProviderFrame([]byte(`{"type":"finish","runId":"r","Name":"x","Xyz":1}`)); err != nil {
		t.Errorf("a finish with unknown members: %v", err)
	}
}

// An answer frame that names its request but has a member that does not
// decode is told so, not that it lacks the requestId it has.
func TestKyokAnswerThatDoesNotDecodeSaysSo(t *testing.T) {
	for raw, want := range map[string]string{
		`{"type":"chunk","requestId":"r1","message":7}`: "chunk frame does not decode",
		`{"type":"done","requestId":7}`:                 "frame needs a requestId",
		`{"type":"done"}`:                               "frame needs a requestId",
		`{"type":"error","requestId":""}`:               "frame needs a requestId",
	} {
		_, err := wire.DecodeKyokFrame([]byte(raw))
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: %v, want %q", raw, err, want)
		}
	}
}
