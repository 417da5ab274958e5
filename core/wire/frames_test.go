package wire_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/core/wire"
)

// Our frame vocabulary is the reference gateway's wire v4, as its published
// wire vectors list it.
func TestWireVectorsV4(t *testing.T) {
	path := filepath.Join("..", "..", "testdata", "reference", "funduq-server-wire-vectors-v4.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("wire vectors missing from the checkout: %v", err)
	}
	var v struct {
		HandshakeVersion int `json:"handshake_version"`
		Handshake        struct {
			Hello, Welcome []string
		} `json:"handshake"`
		Frames struct {
			ProviderInbound    []string `json:"provider_socket_inbound"`
			ProviderOutbound   []string `json:"provider_socket_outbound"`
			RegisterProvider   []string `json:"register_provider"`
			RegisterAgentEntry []string `json:"register_agent_entry"`
		} `json:"frames"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if v.HandshakeVersion != wire.Version {
		t.Fatalf("vectors speak v%d, we speak v%d", v.HandshakeVersion, wire.Version)
	}
	same := func(name string, want, got []string) {
		t.Helper()
		w, g := slices.Clone(want), slices.Clone(got)
		slices.Sort(w)
		slices.Sort(g)
		if !slices.Equal(w, g) {
			t.Errorf("%s: vectors %v, ours %v", name, w, g)
		}
	}
	same("provider inbound", v.Frames.ProviderInbound, wire.ProviderInbound)
	same("provider outbound", v.Frames.ProviderOutbound, wire.ProviderOutbound)
	same("hello", v.Handshake.Hello, fields(wire.Hello{}))
	same("welcome", v.Handshake.Welcome, fields(wire.Welcome{}))
	same("register", v.Frames.RegisterProvider, fields(wire.Register{}, "type"))
	same("register agent entry", v.Frames.RegisterAgentEntry, fields(wire.Registration{}))
}

// fields lists a frame type's JSON keys in the vectors' notation: an
// optional key ends in "?". Keys in skip are left out.
func fields(v any, skip ...string) []string {
	var out []string
	rt := reflect.TypeOf(v)
	optional := map[string]bool{"maxConcurrentRuns": true, "providerName": true, "description": true,
		"agentCardExtra": true, "metadata": true, "takesInterjections": true}
	for i := 0; i < rt.NumField(); i++ {
		name := strings.Split(rt.Field(i).Tag.Get("json"), ",")[0]
		if slices.Contains(skip, name) {
			continue
		}
		if optional[name] {
			name += "?"
		}
		out = append(out, name)
	}
	return out
}

// FuzzPeekType: PeekType reads any input as encoding/json reads its exact
// "type" member: the same verdict and the same type. The oracle decodes
// into a map, whose keys are matched exactly, where a struct field would
// take "TYPE" too (design.md §The provider wire, "Exact names").
func FuzzPeekType(f *testing.F) {
	for _, s := range []string{`{"type":"ack","runId":"r"}`, `{"type":1}`, `null`, `{"TYPE":"a","type":"b"}`, `{"type":"b","Type":null}`,
		`{"type":"\ud800"}`, "{\"type\":\"\xff\"}", `{"type":"a"} x`, `{"type":"a","x":[1,{"type":2}]}`, `{"typ\u0065":"e"}`, `[{"type":"a"}]`,
		`{"Type":"a"}`, `{"type":"a","type":null}`, `{"type":null,"type":"a"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		typ, ok := wire.PeekType(raw)
		var m map[string]json.RawMessage
		var v *string
		wantOK := json.Unmarshal(raw, &m) == nil && m["type"] != nil && json.Unmarshal(m["type"], &v) == nil && v != nil
		want := ""
		if wantOK {
			want = *v
		}
		if ok != wantOK || typ != want {
			t.Fatalf("PeekType(%q) = %q, %v; encoding/json reads %q, %v", raw, typ, ok, want, wantOK)
		}
	})
}
