package main

import (
	"bytes"
	"strings"
	"testing"
)

// `lease status` and `lease handover` with a Redis that refuses
// connections (a wrong FUNDUQ_REDIS_URL, Redis down) say which setting and
// address, and why: they answered "read lease …: context deadline
// exceeded", which names neither, while go-redis's retries used up the
// call's bound and hid the refusal.
func TestLeaseCommandsNameAnUnreachableRedis(t *testing.T) {
	env := emptyLeaseEnv(t)
	addr := closedAddr(t)
	env["FUNDUQ_REDIS_URL"] = "redis://" + addr + "/0"
	for _, args := range [][]string{{"lease", "status"}, {"lease", "handover"}} {
		var out, errb bytes.Buffer
		code := run(args, env, &out, &errb)
		msg := errb.String()
		if code != 1 || !strings.Contains(msg, "FUNDUQ_REDIS_URL") || !strings.Contains(msg, addr) ||
			!strings.Contains(msg, "connection refused") {
			t.Errorf("%v: exit %d, stderr %q; want exit 1 naming FUNDUQ_REDIS_URL, %s and the refusal", args, code, msg, addr)
		}
	}
}
