package door_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/functions/door"
)

// A cancel or resolution proof of the wrong shape is refused with a
// message naming the shape the caller must send, not the Go decoder's
// words (outside test F7: a string timestamp answered "json: cannot
// unmarshal string into Go struct field CancelProof.timestamp of type
// int64").
func TestProofShapeRefusals(t *testing.T) {
	for _, c := range []struct {
		name, raw, want string
		check           func(raw json.RawMessage) error
	}{
		{"cancel timestamp a string", `{"publicKey":"ab","timestamp":"soon","signature":"x"}`, "metadata.cancel must be",
			func(raw json.RawMessage) error {
				_, err := door.CheckCancelProof(raw, "run_1", nil, time.Now())
				return err
			}},
		{"cancel publicKey a number", `{"publicKey":7,"timestamp":1,"signature":"x"}`, "metadata.cancel must be",
			func(raw json.RawMessage) error {
				_, err := door.CheckCancelProof(raw, "run_1", nil, time.Now())
				return err
			}},
		{"resolution signature an object", `{"publicKey":"ab","signature":{}}`, "resolution must be",
			func(raw json.RawMessage) error {
				bag, err := door.ReadCallerBag(json.RawMessage(`{"resolution":`+string(raw)+`}`), "forwardedProps")
				if err != nil {
					return err
				}
				_, err = door.CheckResolution(bag, "run_1", []string{"a"}, nil)
				return err
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.check(json.RawMessage(c.raw))
			var e *door.Error
			if !errors.As(err, &e) || e.Status != 401 {
				t.Fatalf("got %v, want a 401 refusal", err)
			}
			if !strings.Contains(e.Message, c.want) || strings.Contains(e.Message, "Go struct") || strings.Contains(e.Message, "json:") {
				t.Fatalf("message %q: want %q and no decoder text", e.Message, c.want)
			}
		})
	}
}
