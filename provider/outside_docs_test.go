package provider_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// The ways the docs show to run a Client — README's "An agent in Go" and
// the package Example — are what authors copy. Run returns ErrReplaced
// when a newer process of the key took its agents (a rolling deploy); a
// program that exits non-zero on it gets restarted by its supervisor and
// takes the agents back (design.md §Two processes of one key), so every
// shown call of Run must tell ErrReplaced apart before failing.
func TestOutsideDocsRunHandlesErrReplaced(t *testing.T) {
	call := regexp.MustCompile(`(?m)^.*client\.Run\(ctx\).*$(\n.*){0,3}`)
	for _, file := range []string{"../README.md", "example_test.go"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		found := call.FindAllString(string(b), -1)
		if len(found) == 0 {
			t.Errorf("%s: no client.Run(ctx) call found", file)
		}
		for _, snippet := range found {
			if !strings.Contains(snippet, "ErrReplaced") {
				t.Errorf("%s: a shown Run call fails on ErrReplaced:\n%s", file, snippet)
			}
		}
	}
}
