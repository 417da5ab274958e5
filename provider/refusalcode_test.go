package provider

import (
	"context"
	"errors"
	"testing"
	"time"
)

// What a refused register's code says decides whether Run retries
// (design.md §The provider wire, "Refusal codes"): register_refused ends Run
// with ErrRegisterRefused whatever the text, retry_later retries whatever
// the text. A refusal with no code, from a broker older than the code, is
// read by its text as before: one naming a register limit ends Run, any
// other is retried. Before, the code was not read: a refusal for good that
// named no setting was retried for ever.
func TestRegisterRefusalCodeDecides(t *testing.T) {
	for _, tc := range []struct {
		name    string
		refusal string // funduq's error frame answering the first register
		forGood bool
	}{
		{"register_refused", `{"type":"error","message":"something funduq will never take","code":"register_refused"}`, true},
		{"retry_later naming a limit", `{"type":"error","message":"over the limit of 1 (FUNDUQ_MAX_REGISTER_BYTES) for now","code":"retry_later"}`, false},
		{"an unknown code is read by its text", `{"type":"error","message":"over the limit of 1 (FUNDUQ_MAX_REGISTER_BYTES)","code":"some_later_code"}`, true},
		{"no code naming a limit", `{"type":"error","message":"agents[0].metadata is 99 bytes, over the limit of 64 (FUNDUQ_MAX_AGENT_CARD_BYTES)"}`, true},
		{"no code, retry later", `{"type":"error","message":"this register would add 1 agents to those funduq serves, over the limit of 1 at once (FUNDUQ_MAX_SERVED_AGENTS); retry later"}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeFunduq(t)
			f.setHooks(func(f *fakeFunduq) {
				f.afterRegister = func(n int, p *peer) bool {
					if n > 1 {
						return false // registered
					}
					_ = p.writeRaw([]byte(tc.refusal))
					return true
				}
			})
			c, err := New(baseConfig(t, f, echoAgent(newGates())))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- c.Run(ctx) }()
			if p := f.nextPeer(t); p.register == nil {
				t.Fatalf("no register on the first link: %v", p.err)
			}
			if tc.forGood {
				select {
				case err := <-done:
					if !errors.Is(err, ErrRegisterRefused) {
						t.Fatalf("Run = %v, want ErrRegisterRefused", err)
					}
				case p := <-f.peers:
					t.Fatalf("Run registered again on link %d after a refusal for good", p.n)
				case <-time.After(guard):
					t.Fatal("Run neither returned nor registered again")
				}
				return
			}
			select {
			case p := <-f.peers:
				if p.register == nil {
					t.Fatalf("link %d: no register: %v", p.n, p.err)
				}
			case err := <-done:
				t.Fatalf("Run = %v, want it to register again", err)
			case <-time.After(guard):
				t.Fatal("Run neither returned nor registered again")
			}
			waitReady(t, c)
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("Run after cancel = %v", err)
			}
		})
	}
}
