package config_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/config"
)

// The lease TTL's floor is the configuration's, not one binary's: every
// entry that parses the broker's settings refuses a FUNDUQ_LEASE_TTL under
// config.MinLeaseTTL with the same error, naming the setting and its
// floor. 1ns passed config before (only broker-node's serve checked it).
func TestLeaseTTLFloor(t *testing.T) {
	for _, ttl := range []string{"1ns", "2ms", "999ms"} {
		e := good()
		e["FUNDUQ_LEASE_TTL"] = ttl
		_, err := config.ParseBroker(e, config.Host{})
		var ce *config.Error
		if !errors.As(err, &ce) || !strings.Contains(err.Error(), "FUNDUQ_LEASE_TTL: want at least 1s") {
			t.Errorf("FUNDUQ_LEASE_TTL=%s: %v; want a config.Error naming FUNDUQ_LEASE_TTL and its 1s floor", ttl, err)
		}
	}
	e := good()
	e["FUNDUQ_LEASE_TTL"] = "1s"
	c, err := config.ParseBroker(e, config.Host{})
	if err != nil || c.LeaseTTL != time.Second {
		t.Fatalf("FUNDUQ_LEASE_TTL=1s: %v (%v); want it taken", err, c.LeaseTTL)
	}
}
