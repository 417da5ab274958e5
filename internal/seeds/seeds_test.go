package seeds

import (
	"slices"
	"testing"
)

func TestParse(t *testing.T) {
	got, err := Parse(" 1, 3-5 ,9")
	if err != nil || !slices.Equal(got, []uint64{1, 3, 4, 5, 9}) {
		t.Fatalf("Parse: %v %v", got, err)
	}
	for _, bad := range []string{"", ",", "x", "5-3", "1-x"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}
