package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/internal/leaktest"
)

func TestMain(m *testing.M) {
	// The test binary stands in for the bootstrap: run as a child with
	// this variable set, it is the authorizer's main and nothing else.
	if os.Getenv("FUNDUQ_TEST_AUTHORIZER_MAIN") == "1" {
		main()
		return
	}
	leaktest.Main(m)
}

// coldStart runs the authorizer's main, as Lambda starts the bootstrap,
// with env as its whole environment, and returns its exit status and
// what it wrote.
func coldStart(t *testing.T, env ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append([]string{"FUNDUQ_TEST_AUTHORIZER_MAIN=1"}, env...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("%v: the authorizer did not stop on its configuration (err %v):\n%s", env, err, out)
	}
	return exit.ExitCode(), string(out)
}

// A configuration the authorizer cannot work with stops it at its cold
// start with one line naming the variable (README "A missing or malformed
// variable stops the binary with an error naming it"), never the Go field
// behind it, and before it has served anyone: a malformed
// FUNDUQ_AUTH_ALLOW_ANONYMOUS said `parse error on field "AllowAnonymous"`,
// and a negative leeway, a key set URL without a host, or one fetched in
// clear across the internet (where anyone on the path can hand it keys
// and so mint any caller's token) were taken.
func TestOutsideAuthorizerColdStartNamesTheVariable(t *testing.T) {
	jwt := []string{"FUNDUQ_AUTH_JWT_ISSUER=https://idp.example", "FUNDUQ_AUTH_JWT_AUDIENCE=funduq"}
	for _, c := range []struct {
		name, variable string
		env            []string
	}{
		{"anonymous not a bool", "FUNDUQ_AUTH_ALLOW_ANONYMOUS", []string{"FUNDUQ_AUTH_ALLOW_ANONYMOUS=maybe"}},
		{"leeway not a duration", "FUNDUQ_AUTH_JWT_LEEWAY", []string{"FUNDUQ_AUTH_JWT_LEEWAY=a minute"}},
		{"leeway negative", "FUNDUQ_AUTH_JWT_LEEWAY", []string{"FUNDUQ_AUTH_JWT_LEEWAY=-5m"}},
		{"leeway over ten minutes", "FUNDUQ_AUTH_JWT_LEEWAY", []string{"FUNDUQ_AUTH_JWT_LEEWAY=24h"}},
		{"key set URL without a host", "FUNDUQ_AUTH_JWKS_URL", append([]string{"FUNDUQ_AUTH_JWKS_URL=https://"}, jwt...)},
		{"key set URL in clear", "FUNDUQ_AUTH_JWKS_URL", append([]string{"FUNDUQ_AUTH_JWKS_URL=http://idp.example/jwks"}, jwt...)},
		{"key set URL not http", "FUNDUQ_AUTH_JWKS_URL", append([]string{"FUNDUQ_AUTH_JWKS_URL=ftp://idp.example/jwks"}, jwt...)},
		{"issuer without a key set", "FUNDUQ_AUTH_JWKS_URL", jwt},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out := coldStart(t, c.env...)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			if code != 2 || len(lines) != 1 || !strings.Contains(out, c.variable) || strings.Contains(out, "panic") ||
				strings.Contains(out, "field") {
				t.Fatalf("%v: exit %d, output:\n%s\nwant exit 2 and one line naming %s", c.env, code, out, c.variable)
			}
		})
	}
}
