package wire

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The name lists the exact-name check reads are the inbound frames' own
// JSON keys: a field added to a frame without its name here would be read
// ignoring case again (design.md §The provider wire, "Exact names").
func TestInboundNamesAreTheFramesKeys(t *testing.T) {
	for _, tc := range []struct {
		frame any
		names []string
	}{
		{Register{}, registerNames}, {Registration{}, registrationNames}, {DeleteAgent{}, deleteNames},
		{Ack{}, ackNames}, {Event{}, eventNames}, {Finish{}, finishNames}, {Query{}, queryNames},
		{ThreadMessagesParams{}, ThreadMessagesParamNames}, {RegisterModels{}, modelsNames},
		{DeleteModel{}, deleteNames}, {Answer{}, answerNames},
	} {
		var keys []string
		rt := reflect.TypeOf(tc.frame)
		for i := range rt.NumField() {
			switch k := strings.Split(rt.Field(i).Tag.Get("json"), ",")[0]; k {
			case "-":
				keys = append(keys, "type") // Answer's type is read by the peek
			default:
				keys = append(keys, k)
			}
		}
		got, want := slices.Sorted(slices.Values(tc.names)), slices.Sorted(slices.Values(keys))
		if !slices.Equal(got, want) {
			t.Errorf("%T: checked names %v, keys %v", tc.frame, got, want)
		}
		if rt != reflect.TypeOf(Registration{}) && rt != reflect.TypeOf(ThreadMessagesParams{}) {
			for _, n := range tc.names {
				if !slices.Contains(inboundNames, n) {
					t.Errorf("%T: %q is not among the inbound names the peek knows", tc.frame, n)
				}
			}
		}
	}
	for i, n := range inboundNames {
		if !isInboundName(n) {
			t.Errorf("isInboundName(%q) is false", n)
		}
		for _, m := range inboundNames[i+1:] {
			if strings.EqualFold(n, m) {
				t.Errorf("%q and %q are equal ignoring case", n, m)
			}
		}
	}
	if isInboundName("RunId") || isInboundName("description") {
		t.Error("isInboundName takes a name that is not one")
	}
}
