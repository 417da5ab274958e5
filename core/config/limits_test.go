package config_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/config"
)

func TestLimitDefaults(t *testing.T) {
	b, err := config.ParseBroker(good(), config.Host{})
	if err != nil {
		t.Fatal(err)
	}
	if b.BrokerLimits != config.DefaultBrokerLimits() {
		t.Fatalf("broker limits %+v, defaults %+v", b.BrokerLimits, config.DefaultBrokerLimits())
	}
	want := config.BrokerLimits{MaxFrame: 8 << 20, MaxEventsPerRun: 100000, MaxEventBytes: 1 << 20, TicketsPerMinute: 60, KyokMaxConcurrent: 16,
		MaxAgentsPerRegister: 256, MaxAgentDescriptionBytes: 16 << 10, MaxAgentCardBytes: 64 << 10, MaxRegisterBytes: 1 << 20,
		MaxServedAgents: 100000, MaxPendingLinks: 1024}
	if b.BrokerLimits != want {
		t.Fatalf("broker limits %+v, want %+v", b.BrokerLimits, want)
	}
	d, err := config.ParseDoor(good())
	if err != nil {
		t.Fatal(err)
	}
	wd := config.DoorLimits{MaxBody: 1 << 20, MaxKyokBody: 8 << 20, MaxMessages: 1000, MaxJSONDepth: 64, MaxQueuedPerThread: 32,
		AgentsHiddenAfter: 7 * 24 * time.Hour}
	if !reflect.DeepEqual(d.DoorLimits, wd) || !reflect.DeepEqual(config.DefaultDoorLimits(), wd) {
		t.Fatalf("door limits %+v, want %+v", d.DoorLimits, wd)
	}
}

func TestLimitsMustBePositive(t *testing.T) {
	for _, key := range []string{"FUNDUQ_MAX_BODY_BYTES", "FUNDUQ_MAX_MESSAGES", "FUNDUQ_MAX_JSON_DEPTH", "FUNDUQ_MAX_QUEUED_PER_THREAD", "FUNDUQ_KYOK_MAX_BODY_BYTES", "FUNDUQ_AGENTS_HIDDEN_AFTER"} {
		e := good()
		e[key] = "0"
		if _, err := config.ParseDoor(e); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s=0: err %v, want one naming it", key, err)
		}
	}
	for _, key := range []string{"FUNDUQ_MAX_FRAME_BYTES", "FUNDUQ_MAX_EVENTS_PER_RUN", "FUNDUQ_MAX_EVENT_BYTES", "FUNDUQ_TICKETS_PER_MINUTE", "FUNDUQ_KYOK_MAX_CONCURRENT",
		"FUNDUQ_MAX_AGENTS_PER_REGISTER", "FUNDUQ_MAX_AGENT_DESCRIPTION_BYTES", "FUNDUQ_MAX_AGENT_CARD_BYTES", "FUNDUQ_MAX_REGISTER_BYTES",
		"FUNDUQ_MAX_SERVED_AGENTS", "FUNDUQ_MAX_PENDING_LINKS"} {
		e := good()
		e[key] = "-1"
		if _, err := config.ParseBroker(e, config.Host{}); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s=-1: err %v, want one naming it", key, err)
		}
	}
	e := good()
	e["FUNDUQ_MAX_EVENT_BYTES"] = "20000000"
	if _, err := config.ParseBroker(e, config.Host{}); err == nil || !strings.Contains(err.Error(), "FUNDUQ_MAX_FRAME_BYTES") {
		t.Errorf("event larger than a frame: err %v", err)
	}
}

// Records retention is on by default at the doors' hiding horizon (a
// record goes once GET /agents no longer lists it); 0 keeps every record,
// and a horizon under an hour is refused naming the setting.
func TestAgentRetention(t *testing.T) {
	b, err := config.ParseBroker(good(), config.Host{})
	if err != nil {
		t.Fatal(err)
	}
	if b.AgentRetention != config.DefaultDoorLimits().AgentsHiddenAfter {
		t.Fatalf("FUNDUQ_AGENT_RETENTION defaults to %v, want FUNDUQ_AGENTS_HIDDEN_AFTER's %v", b.AgentRetention, config.DefaultDoorLimits().AgentsHiddenAfter)
	}
	e := good()
	e["FUNDUQ_AGENT_RETENTION"] = "0"
	if b, err := config.ParseBroker(e, config.Host{}); err != nil || b.AgentRetention != 0 {
		t.Fatalf("0: %v %v", b.AgentRetention, err)
	}
	for _, v := range []string{"10m", "-1h"} {
		e["FUNDUQ_AGENT_RETENTION"] = v
		if _, err := config.ParseBroker(e, config.Host{}); err == nil || !strings.Contains(err.Error(), "FUNDUQ_AGENT_RETENTION") {
			t.Errorf("%s: err %v, want one naming FUNDUQ_AGENT_RETENTION", v, err)
		}
	}
}

// FUNDUQ_TRUSTED_ORIGINS names origins, comma separated; anything else
// (a path, no scheme) is refused at start naming the variable, not taken
// as an origin no browser ever sends.
func TestTrustedOriginsAreOrigins(t *testing.T) {
	e := good()
	e["FUNDUQ_TRUSTED_ORIGINS"] = "https://app.example,http://localhost:3000"
	d, err := config.ParseDoor(e)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"https://app.example", "http://localhost:3000"}; !reflect.DeepEqual(d.TrustedOrigins, want) {
		t.Fatalf("trusted origins %q, want %q", d.TrustedOrigins, want)
	}
	for _, bad := range []string{"app.example", "https://app.example/chat", "https://app.example,*"} {
		e["FUNDUQ_TRUSTED_ORIGINS"] = bad
		if _, err := config.ParseDoor(e); err == nil || !strings.Contains(err.Error(), "FUNDUQ_TRUSTED_ORIGINS") {
			t.Errorf("FUNDUQ_TRUSTED_ORIGINS=%s: err %v, want one naming it", bad, err)
		}
	}
}
