package runinput_test

import (
	"testing"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/runinput"
)

// BenchmarkBuild is the builder as a door calls it for a plain run.
func BenchmarkBuild(b *testing.B) {
	req := baseRequest()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := runinput.Build(req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBuildWithChain adds a verified one-hop chain (funduq signs the
// dispatch hop) and a KYOK grant.
func BenchmarkBuildWithChain(b *testing.B) {
	caller, _ := identity.NewSignerFromSeedHex(seed(0xa5))
	funduq, _ := identity.NewSignerFromSeedHex(seed(0xb6))
	prov, _ := identity.NewSignerFromSeedHex(seed(0xe1))
	hop, err := identity.SignHop(caller, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	chain, err := identity.VerifyChain([]string{hop.Token})
	if err != nil {
		b.Fatal(err)
	}
	req := baseRequest()
	req.Chain = &chain
	req.Dispatch = runinput.Dispatch{Funduq: funduq, ProviderKey: prov.PublicKeyHex(), AgentName: "translator"}
	req.KyokToken = "a2t0LXZlY3Rvci1ib2R5.0000000000000000000000000000000000000000000000000000000000000000"
	b.ReportAllocs()
	for b.Loop() {
		if _, err := runinput.Build(req); err != nil {
			b.Fatal(err)
		}
	}
}
