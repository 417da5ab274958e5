package config_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/config"
)

func good() map[string]string {
	return map[string]string{
		"FUNDUQ_DATABASE_URL": "postgres://postgres@127.0.0.1:5432/funduq?sslmode=disable",
		"FUNDUQ_REDIS_URL":    "redis://127.0.0.1:6379/0",
		"FUNDUQ_IDENTITY_KEY": strings.Repeat("b6", 32),
		"FUNDUQ_TOKEN_SECRET": strings.Repeat("s3cret-", 5),
	}
}

func TestBrokerDefaults(t *testing.T) {
	c, err := config.ParseBroker(good(), config.Host{Hostname: "box", PID: 42})
	if err != nil {
		t.Fatal(err)
	}
	want := config.Waits{LeaseTTL: 10 * time.Second, DeliverTimeout: 5 * time.Second, OfferingWriteAfter: 50 * time.Millisecond, UnservedTimeout: 45 * time.Second,
		UndeliveredWindow: 1800 * time.Second, ProviderGrace: 30 * time.Second, LinkGrace: 5 * time.Second, ProviderQualityTolerance: 3,
		StoreRetryFor: 30 * time.Second, RegisterDeadline: 30 * time.Second}
	if c.Waits != want {
		t.Fatalf("waits = %+v, want design.md D14's defaults %+v", c.Waits, want)
	}
	if c.ConsoleToken != "" {
		t.Fatalf("console token %q: the console must be off by default", c.ConsoleToken)
	}
	if c.NodeID != "box-42" || c.AdvertiseURL != "http://127.0.0.1:8700" || c.HTTPAddr != "127.0.0.1:8700" {
		t.Fatalf("node %q advertise %q addr %q", c.NodeID, c.AdvertiseURL, c.HTTPAddr)
	}
	if len(c.IdentitySeed()) != 32 {
		t.Fatal("identity seed not decoded")
	}
}

func TestOverrides(t *testing.T) {
	e := good()
	e["FUNDUQ_DELIVER_TIMEOUT"] = "250ms"
	e["FUNDUQ_PROVIDER_GRACE"] = "0s"
	e["FUNDUQ_OFFERING_WRITE_AFTER"] = "0s"
	e["FUNDUQ_LINK_GRACE"] = "0s"
	e["FUNDUQ_REGISTER_DEADLINE"] = "0s"
	e["FUNDUQ_PROVIDER_QUALITY_TOLERANCE"] = "0"
	e["FUNDUQ_NODE_ID"] = "node-a"
	e["FUNDUQ_LOG_LEVEL"] = "debug"
	c, err := config.ParseBroker(e, config.Host{})
	if err != nil {
		t.Fatal(err)
	}
	if c.DeliverTimeout != 250*time.Millisecond || c.ProviderGrace != 0 || c.OfferingWriteAfter != 0 || c.LinkGrace != 0 || c.RegisterDeadline != 0 || c.ProviderQualityTolerance != 0 || c.NodeID != "node-a" || c.LogLevel.String() != "DEBUG" {
		t.Fatalf("overrides not applied: %+v", c)
	}
}

// Each bad input is refused with an error naming the variable, and never
// echoing a secret.
func TestErrorsNameTheVariable(t *testing.T) {
	for _, tc := range []struct {
		key, value, want string
		drop             bool
	}{
		{key: "FUNDUQ_DATABASE_URL", drop: true, want: "FUNDUQ_DATABASE_URL: required and not set"},
		{key: "FUNDUQ_REDIS_URL", value: "", want: "FUNDUQ_REDIS_URL: required and empty"},
		{key: "FUNDUQ_DATABASE_URL", value: "mysql://x", want: "FUNDUQ_DATABASE_URL: want a postgres:// URL"},
		{key: "FUNDUQ_REDIS_URL", value: "http://x", want: "FUNDUQ_REDIS_URL: want a redis:// URL"},
		{key: "FUNDUQ_IDENTITY_KEY", value: "abc", want: "FUNDUQ_IDENTITY_KEY: want 64 lowercase hex"},
		{key: "FUNDUQ_IDENTITY_KEY", value: strings.Repeat("B6", 32), want: "FUNDUQ_IDENTITY_KEY: want 64 lowercase hex"},
		{key: "FUNDUQ_TOKEN_SECRET", drop: true, want: "FUNDUQ_TOKEN_SECRET: required and not set"},
		// An HMAC key anyone could guess forges KYOK tokens: at least 32
		// bytes, counted, never echoed.
		{key: "FUNDUQ_TOKEN_SECRET", value: "s", want: "FUNDUQ_TOKEN_SECRET: want at least 32 bytes"},
		{key: "FUNDUQ_TOKEN_SECRET", value: "s3cret" + strings.Repeat("x", 25), want: "FUNDUQ_TOKEN_SECRET: want at least 32 bytes (openssl rand -hex 32), got 31"},
		{key: "FUNDUQ_LEASE_TTL", value: "ten seconds", want: `FUNDUQ_LEASE_TTL: cannot read "ten seconds"`},
		{key: "FUNDUQ_LEASE_TTL", value: "-1s", want: "FUNDUQ_LEASE_TTL: must be positive"},
		{key: "FUNDUQ_DELIVER_TIMEOUT", value: "0s", want: "FUNDUQ_DELIVER_TIMEOUT: must be positive"},
		// Where 0 is allowed, the error says so, and what 0 means.
		{key: "FUNDUQ_OFFERING_WRITE_AFTER", value: "-1ms", want: "FUNDUQ_OFFERING_WRITE_AFTER: want 0 (written at once) or more, got -1ms"},
		{key: "FUNDUQ_PROVIDER_GRACE", value: "-1s", want: "FUNDUQ_PROVIDER_GRACE: want 0 (no wait for providers after a failover) or more, got -1s"},
		{key: "FUNDUQ_LINK_GRACE", value: "-1s", want: "FUNDUQ_LINK_GRACE: want 0 (a lost link's runs fail at once) or more, got -1s"},
		{key: "FUNDUQ_REGISTER_DEADLINE", value: "-1s", want: "FUNDUQ_REGISTER_DEADLINE: want 0 (no deadline) or more, got -1s"},
		{key: "FUNDUQ_PROVIDER_QUALITY_TOLERANCE", value: "three", want: "FUNDUQ_PROVIDER_QUALITY_TOLERANCE: cannot read"},
		{key: "FUNDUQ_PROVIDER_QUALITY_TOLERANCE", value: "-1", want: "FUNDUQ_PROVIDER_QUALITY_TOLERANCE: must be 0"},
		// One connection cannot be split between queries and runs.
		{key: "FUNDUQ_DB_MAX_CONNS", value: "1", want: "FUNDUQ_DB_MAX_CONNS: want 0 (pgx's default) or at least 2 (provider queries get at most half), got 1"},
		{key: "FUNDUQ_ADVERTISE_URL", value: "ws:/nohost", want: "FUNDUQ_ADVERTISE_URL"},
		{key: "FUNDUQ_LOG_LEVEL", value: "loud", want: "FUNDUQ_LOG_LEVEL: cannot read"},
		{key: "FUNDUQ_CONSOLE_TOKEN", value: "s3cret", want: "FUNDUQ_CONSOLE_TOKEN: want at least 16"},
		{key: "FUNDUQ_CONSOLE_TOKEN", value: "s3cret s3cret s3cret", want: "FUNDUQ_CONSOLE_TOKEN: want at least 16"},
	} {
		t.Run(tc.key+"="+tc.value, func(t *testing.T) {
			e := good()
			if tc.drop {
				delete(e, tc.key)
			} else {
				e[tc.key] = tc.value
			}
			_, err := config.ParseBroker(e, config.Host{})
			var ce *config.Error
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v, want a *config.Error", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), strings.Repeat("b6", 32)) {
				t.Fatalf("error leaks a secret: %q", err)
			}
		})
	}
}

// A door refuses a short FUNDUQ_TOKEN_SECRET as a broker node does: every
// door verifies the tokens any node or door mints.
func TestDoorRefusesAShortTokenSecret(t *testing.T) {
	e := good()
	e["FUNDUQ_TOKEN_SECRET"] = "s3cret"
	for name, parse := range map[string]func() error{
		"door":        func() error { _, err := config.ParseDoor(e); return err },
		"local doors": func() error { _, err := config.ParseLocalDoors(e); return err },
	} {
		err := parse()
		if err == nil || !strings.Contains(err.Error(), "FUNDUQ_TOKEN_SECRET: want at least 32 bytes") || strings.Contains(err.Error(), "s3cret") {
			t.Fatalf("%s: err = %v, want FUNDUQ_TOKEN_SECRET refused without its value", name, err)
		}
	}
	e["FUNDUQ_TOKEN_SECRET"] = strings.Repeat("x", config.MinTokenSecret)
	if _, err := config.ParseDoor(e); err != nil {
		t.Fatalf("a secret of exactly %d bytes: %v", config.MinTokenSecret, err)
	}
}

// Parse reads only the map it is given, never the process environment.
func TestParseReadsOnlyWhatItIsGiven(t *testing.T) {
	for k, v := range good() {
		t.Setenv(k, v)
	}
	if _, err := config.ParseDoor(map[string]string{}); err == nil {
		t.Fatal("ParseDoor succeeded from an empty map: it read the process environment")
	}
	if _, err := config.ParseBroker(nil, config.Host{}); err == nil {
		t.Fatal("ParseBroker succeeded from a nil map: it read the process environment")
	}
	if _, err := config.ParseLocalDoors(good()); err != nil {
		t.Fatal(err)
	}
	if c, err := config.ParseMigrate(good()); err != nil || c.DatabaseURL == "" {
		t.Fatalf("migrate: %v", err)
	}
	m := config.FromList([]string{"A=1", "B=x=y"})
	if m["A"] != "1" || m["B"] != "x=y" {
		t.Fatalf("FromList = %v", m)
	}
}
