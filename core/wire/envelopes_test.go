package wire_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/funduq/funduq-go/core/wire"
)

func readVectors(t *testing.T) []byte {
	t.Helper()
	path := filepath.Join("..", "..", "testdata", "reference", "contract-vectors.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("contract vectors missing from the checkout: %v", err)
	}
	return b
}

func sameJSON(t *testing.T, a, b []byte) {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(x, y) {
		t.Fatalf("not the same JSON:\n%s\n%s", a, b)
	}
}

// The two envelope vectors round-trip through our types unchanged.
func TestWireVectorsRoundTrip(t *testing.T) {
	var f struct {
		Wire []struct {
			Kind  string          `json:"kind"`
			Frame json.RawMessage `json:"frame"`
		} `json:"wire"`
	}
	if err := json.Unmarshal(readVectors(t), &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Wire) == 0 {
		t.Fatal("no wire vectors")
	}
	for _, w := range f.Wire {
		switch w.Kind {
		case "delivered-run":
			d, err := wire.DecodeDeliveredRun(w.Frame)
			if err != nil {
				t.Fatal(err)
			}
			out, _ := wire.Marshal(d)
			sameJSON(t, out, w.Frame)
			frame, _ := wire.Marshal(wire.NewRunFrame(d))
			var keys map[string]json.RawMessage
			_ = json.Unmarshal(frame, &keys)
			if len(keys) != 6 || string(keys["type"]) != `"run"` {
				t.Fatalf("run frame keys: %s", frame)
			}
		case "delivered-completion":
			d, err := wire.DecodeDeliveredCompletion(w.Frame)
			if err != nil {
				t.Fatal(err)
			}
			out, _ := wire.Marshal(d)
			sameJSON(t, out, w.Frame)
		default:
			t.Fatalf("wire vector of unknown kind %q", w.Kind)
		}
	}
}

func TestDecodeIsStrict(t *testing.T) {
	for name, raw := range map[string]string{
		"extra key":     `{"runId":"r","agentName":"a","runInput":{},"threadId":null,"metadata":{},"x":1}`,
		"missing key":   `{"runId":"r","agentName":"a","runInput":{},"metadata":{}}`,
		"wrong type":    `{"runId":1,"agentName":"a","runInput":{},"threadId":null,"metadata":{}}`,
		"not json":      `{`,
		"not an object": `[]`,
	} {
		if _, err := wire.DecodeDeliveredRun([]byte(raw)); !errors.Is(err, wire.ErrEnvelope) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

func FuzzDecodeDeliveredRun(f *testing.F) {
	f.Add([]byte(`{"runId":"r","agentName":"a","runInput":{},"threadId":null,"metadata":{}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		d, err := wire.DecodeDeliveredRun(raw)
		if err != nil {
			return
		}
		if _, err := wire.Marshal(d); err != nil {
			t.Fatalf("decoded envelope does not encode: %v", err)
		}
	})
}

// oldRunFrame is how the SDK read a run frame before DecodeRunFrame: the
// frame as a map, "type" dropped, encoded again, DecodeDeliveredRun.
func oldRunFrame(raw []byte) (wire.DeliveredRun, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return wire.DeliveredRun{}, err
	}
	delete(obj, "type")
	rest, _ := json.Marshal(obj)
	return wire.DecodeDeliveredRun(rest)
}

// DecodeRunFrame reads a run frame as the old four-pass path did: the same
// frames accepted, the same run read from them.
func TestDecodeRunFrameMatchesTheOldPath(t *testing.T) {
	for _, raw := range []string{
		`{"type":"run","runId":"r","agentName":"a","runInput":{"x":[1,2]},"threadId":"t","metadata":{}}`,
		`{"type":"run","runId":"r","agentName":"a","runInput":{},"threadId":null,"metadata":{}}`,
		`{"type":"run","runId":"r","agentName":"a","runInput":{},"threadId":null,"metadata":{},"extra":1}`,
		`{"type":"run","runId":"r","agentName":"a","runInput":{},"threadId":null}`,
		`{"type":"run","runId":1,"agentName":"a","runInput":{},"threadId":null,"metadata":{}}`,
	} {
		got, gerr := wire.DecodeRunFrame([]byte(raw))
		want, werr := oldRunFrame([]byte(raw))
		if (gerr == nil) != (werr == nil) {
			t.Fatalf("%s: accepted %v, the old path %v", raw, gerr == nil, werr == nil)
		}
		if gerr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: read %+v, the old path %+v", raw, got, want)
		}
	}
}

func FuzzDecodeRunFrame(f *testing.F) {
	f.Add([]byte(`{"type":"run","runId":"r","agentName":"a","runInput":{},"threadId":null,"metadata":{}}`))
	f.Add([]byte(`{"type":"run","runId":"r","agentName":"a","runInput":{},"threadId":"t","metadata":{},"x":0}`))
	f.Add([]byte(`{"type":1,"runId":"r","agentName":"a","runInput":{},"threadId":null,"metadata":{}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		if typ, ok := wire.PeekType(raw); !ok || typ != wire.TypeRun {
			return // the SDK peeks a run frame first
		}
		got, gerr := wire.DecodeRunFrame(raw)
		want, werr := oldRunFrame(raw)
		if (gerr == nil) != (werr == nil) {
			t.Fatalf("accepted %v (%v), the old path %v (%v)", gerr == nil, gerr, werr == nil, werr)
		}
		if gerr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("read %+v, the old path %+v", got, want)
		}
	})
}
