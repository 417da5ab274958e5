package provider

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestNewValidatesConfig(t *testing.T) {
	h := func(context.Context, *Run) error { return nil }
	good := func() Config {
		return Config{BaseURL: "http://127.0.0.1:8700", Signer: mustSigner(t, providerSeedHex), Agents: []Agent{{Name: "a", Handler: h}}}
	}
	if _, err := New(good()); err != nil {
		t.Fatalf("good config: %v", err)
	}
	for name, tc := range map[string]struct {
		mut  func(*Config)
		want string
	}{
		"no url":        {func(c *Config) { c.BaseURL = "" }, "BaseURL"},
		"ws url":        {func(c *Config) { c.BaseURL = "ws://h/" }, "BaseURL"},
		"no signer":     {func(c *Config) { c.Signer = nil }, "Signer"},
		"bad pin":       {func(c *Config) { c.FunduqKey = "ABC" }, "FunduqKey"},
		"upper pin":     {func(c *Config) { c.FunduqKey = strings.ToUpper(mustSigner(t, funduqSeedHex).PublicKeyHex()) }, "FunduqKey"},
		"zero capacity": {func(c *Config) { c.MaxConcurrentRuns = intp(0) }, "MaxConcurrentRuns"},
		"no agents":     {func(c *Config) { c.Agents = nil }, "at least one agent"},
		"bad name":      {func(c *Config) { c.Agents[0].Name = "has space" }, "agent name"},
		"dup name":      {func(c *Config) { c.Agents = append(c.Agents, Agent{Name: "a", Handler: h}) }, "twice"},
		"no handler":    {func(c *Config) { c.Agents[0].Handler = nil }, "no Handler"},
		"card array":    {func(c *Config) { c.Agents[0].AgentCardExtra = json.RawMessage(`[]`) }, "AgentCardExtra"},
		"bad metadata":  {func(c *Config) { c.Agents[0].Metadata = json.RawMessage(`{`) }, "Metadata"},
		// What funduq refuses to register for good is refused here, where
		// the author sees it at once, not as a register retried forever.
		"NUL description":   {func(c *Config) { c.Agents[0].Description = "a\x00b" }, "Description"},
		"NUL provider name": {func(c *Config) { c.ProviderName = "p\x00" }, "ProviderName"},
		"NUL in metadata":   {func(c *Config) { c.Agents[0].Metadata = json.RawMessage(`{"a":"\u0000"}`) }, "Metadata"},
		"surrogate in card": {func(c *Config) { c.Agents[0].AgentCardExtra = json.RawMessage(`{"a":"\ud800"}`) }, "AgentCardExtra"},
	} {
		cfg := good()
		tc.mut(&cfg)
		_, err := New(cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New = %v, want an error mentioning %q", name, err, tc.want)
		}
	}
}

func TestRunTwiceAtOnce(t *testing.T) {
	f := newFakeFunduq(t)
	c, _ := startClient(t, baseConfig(t, f, Agent{Name: "a", Handler: newGates().handler}))
	f.registeredPeer(t)
	if err := c.Run(t.Context()); !errors.Is(err, ErrAlreadyRunning) {
		t.Fatalf("second Run = %v", err)
	}
}

func TestBackoffDelay(t *testing.T) {
	b := Backoff{Min: 200 * time.Millisecond, Max: 30 * time.Second}
	for n := range 80 {
		want := b.Max
		if n < 8 {
			want = b.Min << n
		}
		for range 50 {
			d := b.delay(n)
			if d < want/2 || d > want {
				t.Fatalf("delay(%d) = %v, want within [%v, %v]", n, d, want/2, want)
			}
		}
	}
}
