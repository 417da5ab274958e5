package node_test

import (
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/wire"
)

// deleteAgent checks its name against the pattern before asking the store
// (a NUL reached PostgreSQL): every name a register takes must still be
// deleted — at the pattern's length limit, made of each character class it
// allows, one character long — and one a register refuses is answered as
// never registered, not a moment's trouble.
func TestRawEveryRegistrableNameDeletes(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := rawDial(t, h, 0x73, nil)
	long := strings.Repeat("Az09_-", 22)[:128]
	names := []string{long, "a", "_", "-", "Z", "9", "A-b_C-9"}
	p.register(names...)
	for _, n := range names {
		p.text(`{"type":"deleteAgent","name":"` + n + `"}`)
		var d struct{ Type, Name string }
		p.expect(wire.TypeDeleted, &d)
		if d.Name != n {
			t.Fatalf("deleteAgent %q answered deleted %q", n, d.Name)
		}
	}
	for _, n := range []string{long + "x", "A-B_C-9", "é"} {
		p.text(`{"type":"deleteAgent","name":"` + n + `"}`)
		var e struct{ Message, Name string }
		p.expect(wire.TypeError, &e)
		if !strings.Contains(e.Message, "is not registered") || e.Name != n {
			t.Fatalf("deleteAgent %q answered %+v; want it not registered", n, e)
		}
	}
}
