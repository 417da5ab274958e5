package broker

import (
	"testing"

	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/internal/leaktest"
)

func TestMain(m *testing.M) { leaktest.MainWithPools(m) }

// Unset limits take config's defaults, so a broker built without a parsed
// configuration is bounded too.
func TestLimitDefaults(t *testing.T) {
	var s Settings
	s.defaults()
	d := config.DefaultBrokerLimits()
	if s.Limits.MaxEventsPerRun != d.MaxEventsPerRun || s.Limits.MaxEventBytes != d.MaxEventBytes || s.Limits.MaxServedAgents != d.MaxServedAgents ||
		s.Limits.Register != (RegisterLimits{MaxAgents: d.MaxAgentsPerRegister, MaxDescriptionBytes: d.MaxAgentDescriptionBytes,
			MaxCardBytes: d.MaxAgentCardBytes, MaxTotalBytes: d.MaxRegisterBytes}) {
		t.Fatalf("defaults %+v, config's %+v", s.Limits, d)
	}
	set := Limits{MaxEventsPerRun: 5, MaxEventBytes: 10, MaxServedAgents: 6, Register: RegisterLimits{MaxAgents: 1, MaxDescriptionBytes: 2, MaxCardBytes: 3, MaxTotalBytes: 4}}
	s = Settings{Limits: set}
	s.defaults()
	if s.Limits != set {
		t.Fatalf("set limits overridden: %+v", s.Limits)
	}
}
