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
	if s.Limits.MaxEventsPerRun != d.MaxEventsPerRun || s.Limits.MaxEventBytes != d.MaxEventBytes {
		t.Fatalf("defaults %+v, config's %+v", s.Limits, d)
	}
	s = Settings{Limits: Limits{MaxEventsPerRun: 5, MaxEventBytes: 10}}
	s.defaults()
	if s.Limits != (Limits{MaxEventsPerRun: 5, MaxEventBytes: 10}) {
		t.Fatalf("set limits overridden: %+v", s.Limits)
	}
}
