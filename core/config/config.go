package config

import (
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
)

// Storage is what every binary needs to reach shared state.
type Storage struct {
	DatabaseURL string `env:"FUNDUQ_DATABASE_URL,required,notEmpty"`
	RedisURL    string `env:"FUNDUQ_REDIS_URL,required,notEmpty"`
	// RedisPrefix namespaces every Redis key funduq writes, so several
	// deployments can share one Redis.
	RedisPrefix string `env:"FUNDUQ_REDIS_PREFIX" envDefault:"funduq:"`
}

// Identity is funduq's own key and the KYOK token secret; the same on every
// node, because providers pin the key and any door verifies any token.
type Identity struct {
	// IdentityKey is funduq's Ed25519 seed, 64 hex characters.
	IdentityKey string `env:"FUNDUQ_IDENTITY_KEY,required,notEmpty"`
	// TokenSecret is the HMAC secret for KYOK tokens, at least
	// MinTokenSecret bytes.
	TokenSecret string `env:"FUNDUQ_TOKEN_SECRET,required,notEmpty"`
}

// Logging is shared by every binary.
type Logging struct {
	LogLevel slog.Level `env:"FUNDUQ_LOG_LEVEL" envDefault:"info"`
}

// Waits are the broker's clocks, with design.md D14's defaults.
type Waits struct {
	LeaseTTL       time.Duration `env:"FUNDUQ_LEASE_TTL" envDefault:"10s"`
	DeliverTimeout time.Duration `env:"FUNDUQ_DELIVER_TIMEOUT" envDefault:"5s"`
	// OfferingWriteAfter is how long an offer is out unanswered before the
	// record says offering; 0: at once (design.md, the status machine).
	OfferingWriteAfter time.Duration `env:"FUNDUQ_OFFERING_WRITE_AFTER" envDefault:"50ms"`
	UnservedTimeout    time.Duration `env:"FUNDUQ_UNSERVED_TIMEOUT" envDefault:"45s"`
	UndeliveredWindow  time.Duration `env:"FUNDUQ_UNDELIVERED_WINDOW" envDefault:"1800s"`
	ProviderGrace      time.Duration `env:"FUNDUQ_PROVIDER_GRACE" envDefault:"30s"`
	// LinkGrace is how long a provider link lost without a close frame
	// holds its runs for the same key to re-attach, and then how long from
	// the re-attach each waits for the key's report (D5); 0: they fail at
	// once.
	LinkGrace                time.Duration `env:"FUNDUQ_LINK_GRACE" envDefault:"5s"`
	ProviderQualityTolerance int           `env:"FUNDUQ_PROVIDER_QUALITY_TOLERANCE" envDefault:"3"`
	// StoreRetryFor bounds how long the leader retries one write that
	// PostgreSQL keeps failing before it steps down (D13).
	StoreRetryFor time.Duration `env:"FUNDUQ_STORE_RETRY_FOR" envDefault:"30s"`
	// RegisterDeadline is how long a provider or KYOK link may stay open
	// after welcome without a register answered "registered"; past it the link
	// is closed 1008 saying why (design.md §The provider wire). 0: no
	// deadline.
	RegisterDeadline time.Duration `env:"FUNDUQ_REGISTER_DEADLINE" envDefault:"30s"`
}

// DoorLimits bound what one caller request may carry, so nothing a door
// keeps grows with hostile input (issue #10). Every limit refuses with a
// named error; README "Security and limits" lists them.
type DoorLimits struct {
	// MaxBody caps an AG-UI or A2A request body (413 / JSON-RPC -32600).
	MaxBody int64 `env:"FUNDUQ_MAX_BODY_BYTES" envDefault:"1048576"`
	// MaxKyokBody caps a KYOK completion request body (413).
	MaxKyokBody int64 `env:"FUNDUQ_KYOK_MAX_BODY_BYTES" envDefault:"8388608"`
	// MaxMessages caps the messages of one request (422 / -32602).
	MaxMessages int `env:"FUNDUQ_MAX_MESSAGES" envDefault:"1000"`
	// MaxJSONDepth caps the nesting of a request body (400 / -32700).
	MaxJSONDepth int `env:"FUNDUQ_MAX_JSON_DEPTH" envDefault:"64"`
	// MaxQueuedPerThread caps a thread's runs waiting for a provider
	// (queued or offering); one more is 429 with Retry-After.
	MaxQueuedPerThread int `env:"FUNDUQ_MAX_QUEUED_PER_THREAD" envDefault:"32"`
	// AgentsHiddenAfter hides from GET /agents an agent nobody has served
	// for this long (the reference's stale_hidden_window_seconds, a week):
	// its record is kept, and listed again once it is registered.
	AgentsHiddenAfter time.Duration `env:"FUNDUQ_AGENTS_HIDDEN_AFTER" envDefault:"168h"`
	// TrustedOrigins are the web origins (scheme://host[:port], comma
	// separated) whose pages a browser may POST from to the AG-UI and A2A
	// doors, for a deployment that answers CORS in front of them (API
	// Gateway's CORS settings). Every other browser's cross-origin POST is
	// refused 403 cross_origin_refused (design.md §The doors); programs and
	// same-origin pages need none.
	TrustedOrigins []string `env:"FUNDUQ_TRUSTED_ORIGINS" envSeparator:","`
}

func (l DoorLimits) validate() error {
	var errs []error
	for _, v := range []struct {
		name string
		n    int64
	}{
		{"FUNDUQ_MAX_BODY_BYTES", l.MaxBody}, {"FUNDUQ_KYOK_MAX_BODY_BYTES", l.MaxKyokBody},
		{"FUNDUQ_MAX_MESSAGES", int64(l.MaxMessages)}, {"FUNDUQ_MAX_JSON_DEPTH", int64(l.MaxJSONDepth)},
		{"FUNDUQ_MAX_QUEUED_PER_THREAD", int64(l.MaxQueuedPerThread)},
		{"FUNDUQ_AGENTS_HIDDEN_AFTER", int64(l.AgentsHiddenAfter)},
	} {
		if v.n <= 0 {
			errs = append(errs, fmt.Errorf("%s: must be positive, got %d", v.name, v.n))
		}
	}
	cop := http.NewCrossOriginProtection()
	for _, o := range l.TrustedOrigins {
		if err := cop.AddTrustedOrigin(o); err != nil {
			errs = append(errs, fmt.Errorf("FUNDUQ_TRUSTED_ORIGINS: %q is not an origin (scheme://host[:port], no path): %w", o, err))
		}
	}
	return errors.Join(errs...)
}

// DefaultDoorLimits are DoorLimits' defaults (for doors built without a
// parsed configuration, e.g. in tests).
func DefaultDoorLimits() DoorLimits {
	var l DoorLimits
	_ = env.ParseWithOptions(&l, env.Options{Environment: map[string]string{}})
	return l
}

// BrokerLimits bound what a provider or LLM link may make the broker hold.
type BrokerLimits struct {
	// MaxFrame caps one inbound WebSocket frame on /ws/provider and
	// /ws/kyok; a larger frame closes the link with 1009 (message too big).
	MaxFrame int64 `env:"FUNDUQ_MAX_FRAME_BYTES" envDefault:"8388608"`
	// MaxEventsPerRun caps the events one run may store; the event past it
	// fails the run provider_exceeded_event_limit.
	MaxEventsPerRun int `env:"FUNDUQ_MAX_EVENTS_PER_RUN" envDefault:"100000"`
	// MaxEventBytes caps one AG-UI event; a larger one fails the run
	// provider_sent_an_oversized_event.
	MaxEventBytes int `env:"FUNDUQ_MAX_EVENT_BYTES" envDefault:"1048576"`
	// TicketsPerMinute caps the tickets one public key claims (the links
	// it opens) per minute (a Redis counter shared by every node); a
	// POST /tickets for a key at the cap is 429.
	TicketsPerMinute int `env:"FUNDUQ_TICKETS_PER_MINUTE" envDefault:"60"`
	// KyokMaxConcurrent caps the completions in flight on one LLM link;
	// one more is refused to its caller at once (429 from the KYOK door).
	KyokMaxConcurrent int `env:"FUNDUQ_KYOK_MAX_CONCURRENT" envDefault:"16"`
	// The register limits bound what one register may make funduq keep
	// and list (design.md §The provider wire): a register past any of
	// them is refused with an error naming it, and nothing is registered.
	// The defaults are far above an honest provider's (tens of agents, a
	// few KB each).
	//
	// MaxAgentsPerRegister caps the agents one register carries (the
	// models, on a KYOK link).
	MaxAgentsPerRegister int `env:"FUNDUQ_MAX_AGENTS_PER_REGISTER" envDefault:"256"`
	// MaxAgentDescriptionBytes caps one agent's description.
	MaxAgentDescriptionBytes int `env:"FUNDUQ_MAX_AGENT_DESCRIPTION_BYTES" envDefault:"16384"`
	// MaxAgentCardBytes caps one agent's agentCardExtra, and its
	// metadata, each as JSON (and a KYOK register's metadata).
	MaxAgentCardBytes int `env:"FUNDUQ_MAX_AGENT_CARD_BYTES" envDefault:"65536"`
	// MaxRegisterBytes caps one register's agents in all: their names,
	// descriptions, agentCardExtra and metadata.
	MaxRegisterBytes int `env:"FUNDUQ_MAX_REGISTER_BYTES" envDefault:"1048576"`
	// MaxServedAgents caps the agents the leader serves at once, over
	// every key (design.md §The provider wire, "Admission"): a register
	// that would take it past the cap is refused with an error naming it,
	// and nothing is registered. Agents whose link was lost within the
	// link grace, or which the previous leader served within the provider
	// grace, keep their places; nothing served is ever withdrawn for it.
	MaxServedAgents int `env:"FUNDUQ_MAX_SERVED_AGENTS" envDefault:"100000"`
	// MaxPendingLinks caps the links on /ws/provider and /ws/kyok together
	// that have not registered yet (in the handshake, or welcomed and
	// within FUNDUQ_REGISTER_DEADLINE) (design.md §The provider wire,
	// "Admission"): an upgrade past it is refused 503 with Retry-After
	// before anything is spent, its ticket included. A link that
	// registered is not counted. An honest link is pending for the
	// milliseconds of its handshake and register, so 1024 admits a fleet
	// reconnecting at once in waves, while a stranger's keys, each
	// holding links until the deadline, hold at most that many sockets,
	// goroutines and buffers.
	MaxPendingLinks int `env:"FUNDUQ_MAX_PENDING_LINKS" envDefault:"1024"`
}

func (l BrokerLimits) validate() error {
	var errs []error
	for _, v := range []struct {
		name string
		n    int64
	}{
		{"FUNDUQ_MAX_FRAME_BYTES", l.MaxFrame}, {"FUNDUQ_MAX_EVENTS_PER_RUN", int64(l.MaxEventsPerRun)},
		{"FUNDUQ_MAX_EVENT_BYTES", int64(l.MaxEventBytes)}, {"FUNDUQ_TICKETS_PER_MINUTE", int64(l.TicketsPerMinute)},
		{"FUNDUQ_KYOK_MAX_CONCURRENT", int64(l.KyokMaxConcurrent)},
		{"FUNDUQ_MAX_AGENTS_PER_REGISTER", int64(l.MaxAgentsPerRegister)},
		{"FUNDUQ_MAX_AGENT_DESCRIPTION_BYTES", int64(l.MaxAgentDescriptionBytes)},
		{"FUNDUQ_MAX_AGENT_CARD_BYTES", int64(l.MaxAgentCardBytes)},
		{"FUNDUQ_MAX_REGISTER_BYTES", int64(l.MaxRegisterBytes)},
		{"FUNDUQ_MAX_SERVED_AGENTS", int64(l.MaxServedAgents)},
		{"FUNDUQ_MAX_PENDING_LINKS", int64(l.MaxPendingLinks)},
	} {
		if v.n <= 0 {
			errs = append(errs, fmt.Errorf("%s: must be positive, got %d", v.name, v.n))
		}
	}
	if l.MaxEventBytes > 0 && l.MaxFrame > 0 && int64(l.MaxEventBytes) > l.MaxFrame {
		errs = append(errs, fmt.Errorf("FUNDUQ_MAX_EVENT_BYTES (%d) must not exceed FUNDUQ_MAX_FRAME_BYTES (%d)", l.MaxEventBytes, l.MaxFrame))
	}
	return errors.Join(errs...)
}

// DefaultBrokerLimits are BrokerLimits' defaults.
func DefaultBrokerLimits() BrokerLimits {
	var l BrokerLimits
	_ = env.ParseWithOptions(&l, env.Options{Environment: map[string]string{}})
	return l
}

// Broker is the broker node's configuration.
type Broker struct {
	Storage
	Identity
	Logging
	Waits
	BrokerLimits
	HTTPAddr     string `env:"FUNDUQ_HTTP_ADDR" envDefault:"127.0.0.1:8700"`
	AdvertiseURL string `env:"FUNDUQ_ADVERTISE_URL"` // default: http://<HTTPAddr>
	NodeID       string `env:"FUNDUQ_NODE_ID"`       // default: the Host value given to ParseBroker
	// ConsoleToken is the bearer token of the operator console at
	// /console; "" leaves the console off (every /console path is the
	// node's plain 404; the node logs why once, as it starts).
	ConsoleToken string `env:"FUNDUQ_CONSOLE_TOKEN"`
	// LinkEventBacklog bounds the events read from one provider link and
	// not yet stored; a full backlog stops reading the link (backpressure).
	LinkEventBacklog int `env:"FUNDUQ_LINK_EVENT_BACKLOG" envDefault:"1024"`
	// LinkEventBacklogBytes bounds the same events' bytes.
	LinkEventBacklogBytes int `env:"FUNDUQ_LINK_EVENT_BACKLOG_BYTES" envDefault:"4194304"`
	// DBMaxConns caps the node's PostgreSQL pool; 0 keeps pgx's default
	// (max(4, CPUs)). Every lane writes on its own, so a node with many
	// concurrent runs may want more. At least 2: provider queries may
	// hold at most half of it, the runs' writes the rest.
	DBMaxConns int `env:"FUNDUQ_DB_MAX_CONNS" envDefault:"0"`
	// Retention, when set (e.g. 720h), has the leader delete settled runs
	// older than it (events, messages, the run, threads left empty), in
	// batches of RetentionBatch runs; 0 keeps everything.
	Retention      time.Duration `env:"FUNDUQ_RETENTION" envDefault:"0"`
	RetentionBatch int           `env:"FUNDUQ_RETENTION_BATCH" envDefault:"500"`
	// AgentRetention has the leader delete the agents records nobody has
	// served for that long and no thread or run names, and the providers
	// records left with nothing (design.md D8); 0 keeps them. Its default
	// is FUNDUQ_AGENTS_HIDDEN_AFTER's: a record goes once GET /agents no
	// longer lists it, so set it no shorter than the doors' setting.
	AgentRetention time.Duration `env:"FUNDUQ_AGENT_RETENTION" envDefault:"168h"`
	// PprofAddr, when set, serves net/http/pprof on its own listener
	// (loopback only, say 127.0.0.1:6060). Off by default.
	PprofAddr string `env:"FUNDUQ_PPROF_ADDR"`
}

// MinConsoleToken is the shortest FUNDUQ_CONSOLE_TOKEN accepted.
const MinConsoleToken = 16

// MinTokenSecret is the shortest FUNDUQ_TOKEN_SECRET accepted, in bytes.
// It is the HMAC key of every KYOK token (and of the key sealing a KYOK
// context): whoever guesses it mints tokens for any run. 32 bytes is
// HMAC-SHA256's own size; what funduq generates is longer (64 hex
// characters from scripts/dev-up, 64 letters and digits from
// infra/foundation.yaml).
const MinTokenSecret = 32

// Door is a Lambda door's configuration.
type Door struct {
	Storage
	Identity
	Logging
	DoorLimits
}

// LocalDoors is the local server that mounts every door on one port.
type LocalDoors struct {
	Door
	DoorsAddr string `env:"FUNDUQ_DOORS_ADDR" envDefault:"127.0.0.1:8701"`
}

// Migrate is what `broker-node migrate` needs.
type Migrate struct {
	DatabaseURL string `env:"FUNDUQ_DATABASE_URL,required,notEmpty"`
	// LockTimeout is the longest a migration statement waits for a lock
	// (the migration sessions' lock_timeout), after which the migration is
	// retried and then fails naming the long transactions: waiting on,
	// its lock request would queue every query on the table behind it
	// (design.md §Deployment). 0 waits for ever, as PostgreSQL does.
	LockTimeout time.Duration `env:"FUNDUQ_MIGRATE_LOCK_TIMEOUT" envDefault:"5s"`
	Logging
}

// LeaseTool is what `broker-node lease` needs: the shared stores.
type LeaseTool struct {
	Storage
	Logging
}

// ParseLeaseTool reads the lease tool's settings from environ.
func ParseLeaseTool(environ map[string]string) (LeaseTool, error) {
	var c LeaseTool
	if err := parse(&c, environ); err != nil {
		return LeaseTool{}, err
	}
	return c, wrap(c.Storage.validate())
}

// Host names the process for NodeID's default (hostname + pid).
type Host struct {
	Hostname string
	PID      int
}

// ParseBroker reads the broker node's settings from environ.
func ParseBroker(environ map[string]string, host Host) (Broker, error) {
	var c Broker
	if err := parse(&c, environ); err != nil {
		return Broker{}, err
	}
	if c.AdvertiseURL == "" {
		c.AdvertiseURL = "http://" + c.HTTPAddr
	}
	if c.NodeID == "" {
		c.NodeID = fmt.Sprintf("%s-%d", host.Hostname, host.PID)
	}
	errs := []error{c.Storage.validate(), c.Identity.validate(), c.Waits.validate(), c.BrokerLimits.validate()}
	if c.LinkEventBacklog <= 0 {
		errs = append(errs, fmt.Errorf("FUNDUQ_LINK_EVENT_BACKLOG: want a positive number of events, got %d", c.LinkEventBacklog))
	}
	if c.DBMaxConns < 0 || c.DBMaxConns == 1 {
		errs = append(errs, fmt.Errorf("FUNDUQ_DB_MAX_CONNS: want 0 (pgx's default) or at least 2 (provider queries get at most half), got %d", c.DBMaxConns))
	}
	if c.Retention < 0 || (c.Retention > 0 && c.Retention < time.Hour) {
		errs = append(errs, fmt.Errorf("FUNDUQ_RETENTION: want 0 (keep everything) or at least 1h, got %v", c.Retention))
	}
	if c.AgentRetention < 0 || (c.AgentRetention > 0 && c.AgentRetention < time.Hour) {
		errs = append(errs, fmt.Errorf("FUNDUQ_AGENT_RETENTION: want 0 (keep every record) or at least 1h, got %v", c.AgentRetention))
	}
	if c.RetentionBatch < 1 || c.RetentionBatch > 10000 {
		errs = append(errs, fmt.Errorf("FUNDUQ_RETENTION_BATCH: want 1 to 10000 runs, got %d", c.RetentionBatch))
	}
	if c.LinkEventBacklogBytes <= 0 {
		errs = append(errs, fmt.Errorf("FUNDUQ_LINK_EVENT_BACKLOG_BYTES: want a positive number of bytes, got %d", c.LinkEventBacklogBytes))
	}
	if u, err := url.Parse(c.AdvertiseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("FUNDUQ_ADVERTISE_URL: want an http(s) URL, got %q", c.AdvertiseURL))
	}
	if c.ConsoleToken != "" && (len(c.ConsoleToken) < MinConsoleToken || strings.ContainsFunc(c.ConsoleToken, func(r rune) bool { return r <= ' ' || r == 0x7f })) {
		// Never echo the value: it is a secret.
		errs = append(errs, fmt.Errorf("FUNDUQ_CONSOLE_TOKEN: want at least %d printable characters without spaces, got %d characters",
			MinConsoleToken, len(c.ConsoleToken)))
	}
	return c, wrap(errors.Join(errs...))
}

// ParseDoor reads a Lambda door's settings from environ.
func ParseDoor(environ map[string]string) (Door, error) {
	var c Door
	if err := parse(&c, environ); err != nil {
		return Door{}, err
	}
	return c, wrap(errors.Join(c.Storage.validate(), c.Identity.validate(), c.DoorLimits.validate()))
}

// ParseLocalDoors reads the local doors server's settings from environ.
func ParseLocalDoors(environ map[string]string) (LocalDoors, error) {
	var c LocalDoors
	if err := parse(&c, environ); err != nil {
		return LocalDoors{}, err
	}
	return c, wrap(errors.Join(c.Storage.validate(), c.Identity.validate(), c.DoorLimits.validate()))
}

// ParseMigrate reads what the migrate command needs from environ.
func ParseMigrate(environ map[string]string) (Migrate, error) {
	var c Migrate
	if err := parse(&c, environ); err != nil {
		return Migrate{}, err
	}
	var lockErr error
	if c.LockTimeout < 0 {
		lockErr = fmt.Errorf("FUNDUQ_MIGRATE_LOCK_TIMEOUT: want 0 (no bound) or more, got %s", c.LockTimeout)
	}
	return c, wrap(errors.Join(Storage{DatabaseURL: c.DatabaseURL, RedisURL: "redis://unused"}.validate(), lockErr))
}

// IdentitySeed returns the decoded identity seed (validated by Parse*).
func (i Identity) IdentitySeed() []byte {
	b, _ := hex.DecodeString(i.IdentityKey)
	return b
}

func (s Storage) validate() error {
	var errs []error
	if u, err := url.Parse(s.DatabaseURL); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		errs = append(errs, fmt.Errorf("FUNDUQ_DATABASE_URL: want a postgres:// URL, got %s", redact(s.DatabaseURL)))
	}
	if u, err := url.Parse(s.RedisURL); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix") {
		errs = append(errs, fmt.Errorf("FUNDUQ_REDIS_URL: want a redis:// URL, got %s", redact(s.RedisURL)))
	}
	return errors.Join(errs...)
}

func (i Identity) validate() error {
	var errs []error
	b, err := hex.DecodeString(i.IdentityKey)
	if err != nil || len(b) != 32 || strings.ToLower(i.IdentityKey) != i.IdentityKey {
		// Never echo the value: it is a private key.
		errs = append(errs, fmt.Errorf("FUNDUQ_IDENTITY_KEY: want 64 lowercase hex characters (a 32-byte Ed25519 seed), got %d characters", len(i.IdentityKey)))
	}
	if len(i.TokenSecret) < MinTokenSecret {
		// Never echo the value: it is a secret.
		errs = append(errs, fmt.Errorf("FUNDUQ_TOKEN_SECRET: want at least %d bytes (openssl rand -hex 32), got %d", MinTokenSecret, len(i.TokenSecret)))
	}
	return errors.Join(errs...)
}

// MinLeaseTTL is the shortest FUNDUQ_LEASE_TTL funduq takes. The lease is
// renewed every third of it and each Redis call is bounded at
// redisbound.Slack (1.5 s): under 1 ms Redis refuses the expiry and a node
// campaigned in a hot loop, never leading; a few milliseconds led while
// renewing without pause. The scaling suite's nodes run at 2 s. It is
// checked here, with the other waits, so every entry that reads the
// setting refuses it alike.
const MinLeaseTTL = time.Second

func (w Waits) validate() error {
	var errs []error
	if w.LeaseTTL > 0 && w.LeaseTTL < MinLeaseTTL {
		errs = append(errs, fmt.Errorf("FUNDUQ_LEASE_TTL: want at least %s (e.g. 10s, the default), got %s", MinLeaseTTL, w.LeaseTTL))
	}
	// zero, when set, is what 0 means for a wait that may be 0 (it turns
	// the wait off); the others must be positive.
	for _, d := range []struct {
		name string
		v    time.Duration
		zero string
	}{
		{"FUNDUQ_LEASE_TTL", w.LeaseTTL, ""},
		{"FUNDUQ_DELIVER_TIMEOUT", w.DeliverTimeout, ""},
		{"FUNDUQ_OFFERING_WRITE_AFTER", w.OfferingWriteAfter, "written at once"},
		{"FUNDUQ_UNSERVED_TIMEOUT", w.UnservedTimeout, ""},
		{"FUNDUQ_UNDELIVERED_WINDOW", w.UndeliveredWindow, ""},
		{"FUNDUQ_PROVIDER_GRACE", w.ProviderGrace, "no wait for providers after a failover"},
		{"FUNDUQ_LINK_GRACE", w.LinkGrace, "a lost link's runs fail at once"},
		{"FUNDUQ_STORE_RETRY_FOR", w.StoreRetryFor, ""},
		{"FUNDUQ_REGISTER_DEADLINE", w.RegisterDeadline, "no deadline"},
	} {
		switch {
		case d.zero != "" && d.v < 0:
			errs = append(errs, fmt.Errorf("%s: want 0 (%s) or more, got %s", d.name, d.zero, d.v))
		case d.zero == "" && d.v <= 0:
			errs = append(errs, fmt.Errorf("%s: must be positive, got %s", d.name, d.v))
		}
	}
	if w.ProviderQualityTolerance < 0 {
		errs = append(errs, fmt.Errorf("FUNDUQ_PROVIDER_QUALITY_TOLERANCE: must be 0 (disabled) or more, got %d", w.ProviderQualityTolerance))
	}
	return errors.Join(errs...)
}

// ParseInto fills v (a pointer to a struct whose fields carry `env` tags)
// from environ as the Parse* functions do: an error names each variable
// (never the Go field behind it) and hides the value of a key or secret.
// For binaries outside this package's settings (the authorizer).
func ParseInto(v any, environ map[string]string) error { return parse(v, environ) }

// parse fills v from environ, translating caarlos0/env's errors so each
// names the variable (its parse errors name the Go field).
func parse(v any, environ map[string]string) error {
	if environ == nil {
		environ = map[string]string{} // an empty map, never the process environment
	}
	err := env.ParseWithOptions(v, env.Options{Environment: environ})
	if err == nil {
		return nil
	}
	keys := fieldKeys(reflect.TypeOf(v).Elem())
	var agg env.AggregateError
	if !errors.As(err, &agg) {
		return wrap(err)
	}
	var out []error
	for _, e := range agg.Errors {
		var pe env.ParseError
		var unset env.VarIsNotSetError
		var empty env.EmptyVarError
		switch {
		case errors.As(e, &pe):
			key := keys[pe.Name]
			raw := environ[key]
			if strings.Contains(key, "KEY") || strings.Contains(key, "SECRET") {
				raw = "(hidden)"
			}
			out = append(out, fmt.Errorf("%s: cannot read %q as %s: %v", key, raw, pe.Type, pe.Err))
		case errors.As(e, &unset):
			out = append(out, fmt.Errorf("%s: required and not set", unset.Key))
		case errors.As(e, &empty):
			out = append(out, fmt.Errorf("%s: required and empty", empty.Key))
		default:
			out = append(out, e)
		}
	}
	return wrap(errors.Join(out...))
}

// fieldKeys maps each (possibly embedded) field name to its env key.
func fieldKeys(t reflect.Type) map[string]string {
	out := map[string]string{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			for k, v := range fieldKeys(f.Type) {
				out[k] = v
			}
			continue
		}
		if tag := f.Tag.Get("env"); tag != "" {
			out[f.Name] = strings.SplitN(tag, ",", 2)[0]
		}
	}
	return out
}

// Error is every configuration error; a binary prints it and exits.
type Error struct{ Err error }

func (e *Error) Error() string {
	return "configuration: " + strings.ReplaceAll(e.Err.Error(), "\n", "; ")
}
func (e *Error) Unwrap() error { return e.Err }

func wrap(err error) error {
	if err == nil {
		return nil
	}
	return &Error{Err: err}
}

// redact hides a URL's password.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable)"
	}
	return u.Redacted()
}
