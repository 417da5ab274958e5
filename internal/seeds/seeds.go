// Package seeds reads the seed list of a seeded fault test from the
// environment ("1,2,5-9"), so a failing seed found in a long run replays
// alone, and the test command runs a small default set that stays fast.
package seeds

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// Parse reads a list of seeds and ranges: "1,2,5-9".
func Parse(spec string) ([]uint64, error) {
	var out []uint64
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.ParseUint(strings.TrimSpace(lo), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("seed %q: %w", part, err)
		}
		b := a
		if isRange {
			if b, err = strconv.ParseUint(strings.TrimSpace(hi), 10, 64); err != nil || b < a {
				return nil, fmt.Errorf("seed range %q", part)
			}
		}
		for x := a; x <= b; x++ {
			out = append(out, x)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no seeds in %q", spec)
	}
	return out, nil
}

// Run runs fn as a subtest per seed of $env (def when unset), and on a
// failure logs how to replay that seed alone.
func Run(t *testing.T, env, def string, fn func(t *testing.T, seed uint64)) {
	t.Helper()
	spec := os.Getenv(env)
	if spec == "" {
		spec = def
	}
	list, err := Parse(spec)
	if err != nil {
		t.Fatalf("%s: %v", env, err)
	}
	for _, seed := range list {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			fn(t, seed)
			if t.Failed() {
				t.Logf("FAILED seed %d; replay with %s=%d go test -race -count=1 -run '%s'", seed, env, seed, t.Name())
			}
		})
	}
}
