package wire_test

import (
	"runtime"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/core/wire"
)

// A seq's literal is read for what it says (an integer out of range, or
// one written with a fraction or an exponent) without arithmetic on its
// every digit: big.ParseFloat's work on a literal of n digits grows as
// n², so an event frame whose seq was a few MiB of digits — a stranger
// may send one before it registers — held a core for minutes (4 MiB of
// digits: 27 s; the frame limit is 8 MiB) and allocated
// hundreds of times the frame. What decoding such a frame allocates is
// what shows it, the work being allocation-bound.
func TestLongSeqLiteralsAreCheap(t *testing.T) {
	for _, tc := range []struct{ seq, want string }{
		{"9" + strings.Repeat("7", 256<<10), "seq is out of range"},
		{"-9" + strings.Repeat("7", 256<<10), "seq is out of range"},
		{"1." + strings.Repeat("0", 256<<10), "seq must be an integer written without a fraction or exponent"},
		{"1" + strings.Repeat("0", 256<<10) + "e-262144", "seq must be an integer written without a fraction or exponent"},
	} {
		frame := []byte(`{"type":"event","runId":"r1","seq":` + tc.seq + `,"event":{"type":"RUN_STARTED"}}`)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err := wire.DecodeProviderFrame(frame)
		runtime.ReadMemStats(&after)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("a seq of %d characters: %v; want %q", len(tc.seq), err, tc.want)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 32*uint64(len(frame)) {
			t.Errorf("decoding a frame of %d bytes (its seq %.10s…) allocated %d bytes, %d times the frame; want it in proportion",
				len(frame), tc.seq, alloc, alloc/uint64(len(frame)))
		}
	}
}
