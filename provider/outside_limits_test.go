package provider_test

import (
	"context"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/broker"
	"github.com/funduq/funduq-go/provider"
)

// funduq refuses for good a register whose providerName is over
// broker.MaxProviderNameBytes (a fixed limit, no setting raises it): New
// refuses it, naming the field, where the author sees it at once, rather
// than Run registering in vain forever. Exactly at the limit is fine.
func TestOutsideProviderNameOverFunduqsLimit(t *testing.T) {
	if provider.MaxProviderNameBytes != broker.MaxProviderNameBytes {
		t.Fatalf("provider.MaxProviderNameBytes = %d, funduq's limit is %d", provider.MaxProviderNameBytes, broker.MaxProviderNameBytes)
	}
	s := outsideSigner(t, 0x5f)
	cfg := func(name string) provider.Config {
		return provider.Config{BaseURL: "http://127.0.0.1:1", Signer: s, ProviderName: name,
			Agents: []provider.Agent{{Name: "a", Handler: func(context.Context, *provider.Run) error { return nil }}}}
	}
	if _, err := provider.New(cfg(strings.Repeat("é", broker.MaxProviderNameBytes/2))); err != nil {
		t.Fatalf("a name of exactly %d bytes: %v", broker.MaxProviderNameBytes, err)
	}
	_, err := provider.New(cfg(strings.Repeat("n", broker.MaxProviderNameBytes+1)))
	if err == nil || !strings.Contains(err.Error(), "ProviderName") {
		t.Fatalf("New with a %d-byte ProviderName = %v, want an error naming ProviderName", broker.MaxProviderNameBytes+1, err)
	}
}
