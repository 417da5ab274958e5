package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// A FUNDUQ_BROKER_URL the agent cannot use is refused at start naming the
// setting the user set and what is wrong with it: the library's words
// ("Config.BaseURL does not parse") name a field of a Go struct the user
// of the example never wrote. A password in the URL is not repeated.
func TestEchoAgentNamesABadBrokerURL(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"http://127.0.0.1:87 00", "does not parse"},
		{"127.0.0.1:8700", "http(s) URL with a host"},
		{"ws://127.0.0.1:8700", "http(s) URL with a host"},
		{"https://", "http(s) URL with a host"},
		{"https://user:s3cret@funduq.example", "user name or password"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), env(map[string]string{
			"FUNDUQ_BROKER_URL":     tc.url,
			"FUNDUQ_AGENT_KEY_FILE": filepath.Join(t.TempDir(), "agent.key"),
		}), &out, &errb)
		log := errb.String()
		if code != 2 || !strings.Contains(log, "FUNDUQ_BROKER_URL") || !strings.Contains(log, tc.want) ||
			strings.Contains(log, "Config.BaseURL") || strings.Contains(log, "s3cret") {
			t.Errorf("FUNDUQ_BROKER_URL=%q: exit %d, log %s; want exit 2 naming FUNDUQ_BROKER_URL and %q", tc.url, code, log, tc.want)
		}
	}
}
