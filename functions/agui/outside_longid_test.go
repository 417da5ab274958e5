package agui_test

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/functions/door"
)

// longID is an id of n hex characters that PostgreSQL cannot compress.
func longID(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, (n+1)/2)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)[:n]
}

// A caller's id longer than the door keeps (1024 bytes) — a runId, or the threadId of
// a known caller's first turn, both kept to recognise a retry — is the
// caller's mistake: 422 invalid_run_input naming it, nothing written; not
// 500 "internal error" from an index that cannot hold it.
func TestOutsideCallerIDTooLongIsRefused(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	long := longID(t, 9000)
	caller := signer(t, 0xc1)
	for _, x := range []struct {
		name, body, field string
		known             bool
	}{
		{"runId", input("t", long, ""), "runId", false},
		{"a known caller's threadId", input(long, "r", ""), "threadId", true},
	} {
		t.Run(x.name, func(t *testing.T) {
			var hdr map[string]string
			if x.known {
				hdr = presenterHdr(caller, x.body)
			}
			code, _, got := jsonCall(t, "POST", aguiURL(srv, p.Key, "echo"), x.body, hdr)
			if code != 422 || errCode(got) != door.CodeInvalidRunInput || !strings.Contains(mustJSON(got), x.field) {
				t.Fatalf("got %d %v, want 422 %s naming %s", code, got, door.CodeInvalidRunInput, x.field)
			}
			if n := runCount(t, h); n != 0 {
				t.Fatalf("%d runs written", n)
			}
		})
	}
	// At the limit (1024 bytes) an id is taken.
	s := openStream(t, "POST", aguiURL(srv, p.Key, "echo"), input("t", longID(t, 1024), ""), nil)
	defer s.close()
}
