package procstack

import (
	"encoding/hex"
	"io"
	"net/url"
	"os"
	"strings"
	"time"
)

// Defaults of the zero Config durations.
const (
	DefaultBoot         = 30 * time.Second
	DefaultProbeTimeout = time.Second
)

// Config is what every process of a Stack shares. New validates it.
type Config struct {
	Binaries Binaries

	// Storage and identity: FUNDUQ_DATABASE_URL (a migrated database),
	// FUNDUQ_REDIS_URL, FUNDUQ_REDIS_PREFIX, FUNDUQ_IDENTITY_KEY (funduq's
	// Ed25519 seed, 64 hex digits) and FUNDUQ_TOKEN_SECRET of every process.
	DatabaseURL string
	RedisURL    string
	RedisPrefix string
	IdentityKey string
	TokenSecret string

	// Env is appended to every process's environment after the settings
	// above (a later KEY= wins): lease TTL, timeouts, log level. Inherit
	// starts the environment from this process's own; otherwise only PATH
	// and HOME are passed on, so the stack sees nothing but what it is given.
	Env     []string
	Inherit bool

	// LogDir receives each process's stdout and stderr, one file per
	// incarnation (name.log, then name.2.log, …). It must exist; the
	// caller owns it. Echo, when set, receives a copy of every line.
	LogDir string
	Echo   io.Writer

	// Boot bounds a process becoming ready when the caller's context has
	// no earlier deadline (default DefaultBoot): a hang guard, not a wait.
	Boot time.Duration
	// ProbeTimeout bounds one /readyz probe (default DefaultProbeTimeout).
	ProbeTimeout time.Duration
	// StopGrace is how long Close lets a process exit after SIGTERM
	// before SIGKILL; 0 sends SIGKILL at once (the scaling suite wants no
	// clean-up of any kind).
	StopGrace time.Duration
}

// Validate reports the first field that cannot work, as a *ConfigError.
func (c Config) Validate() error {
	bad := func(f, p string) error { return &ConfigError{Field: f, Problem: p} }
	if c.Binaries.Broker == "" && c.Binaries.Doors == "" {
		return bad("Binaries", "names no program (Build makes them)")
	}
	for f, p := range map[string]string{"Binaries.Broker": c.Binaries.Broker, "Binaries.Doors": c.Binaries.Doors} {
		if p == "" {
			continue
		}
		if st, err := os.Stat(p); err != nil || st.IsDir() {
			return bad(f, "no program at "+p)
		}
	}
	if u, err := url.Parse(c.DatabaseURL); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return bad("DatabaseURL", "want a postgres:// URL")
	}
	if u, err := url.Parse(c.RedisURL); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss") {
		return bad("RedisURL", "want a redis:// URL")
	}
	// An empty prefix would share keys with every other user of the
	// Redis (and let a caller's clean-up of "prefix*" take them all).
	if c.RedisPrefix == "" {
		return bad("RedisPrefix", "empty")
	}
	if b, err := hex.DecodeString(c.IdentityKey); err != nil || len(b) != 32 {
		return bad("IdentityKey", "want a 32-byte Ed25519 seed in hex")
	}
	if c.TokenSecret == "" {
		return bad("TokenSecret", "empty")
	}
	for _, kv := range c.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return bad("Env", "want KEY=VALUE, got "+kv)
		}
	}
	if st, err := os.Stat(c.LogDir); c.LogDir == "" || err != nil || !st.IsDir() {
		return bad("LogDir", "want an existing folder, got "+c.LogDir)
	}
	if c.Boot < 0 || c.ProbeTimeout < 0 || c.StopGrace < 0 {
		return bad("Boot/ProbeTimeout/StopGrace", "negative")
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Boot == 0 {
		c.Boot = DefaultBoot
	}
	if c.ProbeTimeout == 0 {
		c.ProbeTimeout = DefaultProbeTimeout
	}
	return c
}

// baseEnv is the environment every process starts from.
func (c Config) baseEnv() []string {
	var env []string
	if c.Inherit {
		env = os.Environ()
	} else {
		env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	}
	env = append(env,
		"FUNDUQ_DATABASE_URL="+c.DatabaseURL, "FUNDUQ_REDIS_URL="+c.RedisURL, "FUNDUQ_REDIS_PREFIX="+c.RedisPrefix,
		"FUNDUQ_IDENTITY_KEY="+c.IdentityKey, "FUNDUQ_TOKEN_SECRET="+c.TokenSecret)
	return append(env, c.Env...)
}
