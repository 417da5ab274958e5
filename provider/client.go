package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/wire"
)

// Defaults and limits.
const (
	// DefaultPingInterval is how often an idle link sends a WebSocket ping
	// when Config.PingInterval is zero.
	DefaultPingInterval = 30 * time.Second
	// DefaultStallTimeout is how long one write may wait for funduq to read
	// it when Config.StallTimeout is zero.
	DefaultStallTimeout = 2 * time.Minute
	// QueryTimeout bounds how long Query waits for its queryResult.
	QueryTimeout = 30 * time.Second
	// MaxBufferedFrames is how many event frames one run may have waiting to
	// be written; Emit waits for room beyond it. A run's closing RUN_ERROR and
	// its finish are always accepted.
	MaxBufferedFrames = 10000
	// DefaultRetention is how long a finished run's frames are kept for
	// resending when Config.Retention is zero.
	DefaultRetention = 5 * time.Minute
	// MaxRetainedRuns bounds how many finished runs are kept for resending;
	// beyond it the oldest is forgotten first.
	MaxRetainedRuns = 10000
	// MaxProviderNameBytes is the longest Config.ProviderName funduq
	// registers (a fixed limit of the broker: no setting raises it).
	MaxProviderNameBytes = 256

	handshakeTimeout = 10 * time.Second
	writeTimeout     = 10 * time.Second
	drainTimeout     = 5 * time.Second
	// endWriteTimeout bounds writing the frames that end the runs a
	// shutdown's drain gave up on (endHeldRuns).
	endWriteTimeout = time.Second
	maxFrameBytes   = 32 << 20
)

// shutdownMessage is the RUN_ERROR message of a run ended because the
// client shut down before its handler returned.
const shutdownMessage = "the provider shut down before the agent finished this run"

// notStartedMessage is the RUN_ERROR message of a run still queued behind
// its thread (Config.SerializePerThread) when the client shut down.
const notStartedMessage = "the provider shut down before this run started"

// Errors a Client reports.
var (
	// ErrAlreadyRunning: Run was called while another Run of the same client
	// was still serving.
	ErrAlreadyRunning = errors.New("provider: client is already running")
	// ErrNotConnected: Query was called with no registered link.
	ErrNotConnected = errors.New("provider: not connected")
	// ErrLinkLost: the link a Query was sent on dropped before its answer came.
	ErrLinkLost = errors.New("provider: link lost")
	// ErrQueryAskAgain: funduq answered a query "ask again" (its queries
	// were busy, or its read ran out of time); the *QueryError it answers
	// with is this error (errors.Is), and asking again later may succeed.
	ErrQueryAskAgain = errors.New("provider: funduq asks for the query again")
	// ErrQueryTimeout: no queryResult within QueryTimeout.
	ErrQueryTimeout = errors.New("provider: query timed out")
	// ErrPinMismatch: POST /tickets named a funduq key other than the pinned one.
	ErrPinMismatch = errors.New("provider: funduq key does not match the pinned key")
	// ErrBadWelcome: the first frame after hello was not a welcome that
	// verifies under funduq's key.
	ErrBadWelcome = errors.New("provider: bad welcome")
	// ErrReplaced: Run stopped because a newer process of the same key
	// registered every agent this client serves (design.md D5); the runs
	// this client held were finished first.
	ErrReplaced = errors.New("provider: replaced by a newer process of the same key")
	// ErrRegisterRefused: Run stopped because funduq refused register for
	// a reason retrying cannot fix (its error's code register_refused):
	// past one of the broker's register limits
	// (FUNDUQ_MAX_AGENTS_PER_REGISTER, FUNDUQ_MAX_AGENT_DESCRIPTION_BYTES,
	// FUNDUQ_MAX_AGENT_CARD_BYTES, FUNDUQ_MAX_REGISTER_BYTES,
	// FUNDUQ_MAX_FRAME_BYTES), or a key whose fingerprint another key
	// holds. The error Run returns wraps it and quotes funduq's reason;
	// nothing was registered.
	ErrRegisterRefused = errors.New("provider: funduq refused register for good")
	// ErrNotRegistered: the frame after register was not registered.
	ErrNotRegistered = errors.New("provider: register was not answered with registered")
	// ErrCancelRequested is the cause of a run context cancelled because
	// funduq sent cancel for the run (see context.Cause).
	ErrCancelRequested = errors.New("provider: funduq asked to cancel the run")
	// ErrRunNotHeld is the cause of a run context cancelled because funduq
	// answered one of the run's reports with "no such run": it no longer
	// holds the run, so nothing the handler emits will be recorded; Emit
	// returns it from then on.
	ErrRunNotHeld = errors.New("provider: funduq does not hold this run")
	// ErrRunFinished: Emit on a run whose terminal event (RUN_FINISHED or
	// RUN_ERROR) was emitted or whose handler has returned; the event was
	// not sent (funduq would refuse it).
	ErrRunFinished = errors.New("provider: run already finished")
	// ErrDetachedRun: Emit on a Run that was not delivered by a Client.
	ErrDetachedRun = errors.New("provider: run is not attached to a client")
	// ErrInvalidEvent: Emit was given an event funduq would refuse as
	// malformed (not valid AG-UI, a repeated key, nested too deeply),
	// which fails the run; it was not sent.
	ErrInvalidEvent = errors.New("provider: not a valid AG-UI event")
	// ErrEventTooLarge is the cause of a run context cancelled, and Emit's
	// error, once funduq closed the link over one of the run's events
	// (1009, message too big): the client ended the run with a RUN_ERROR
	// in that event's place rather than resend it to every next link.
	ErrEventTooLarge = errors.New("provider: funduq closed the link over an event too large to read")
)

// Backoff bounds the reconnect delay: the n-th consecutive failure waits about
// Min·2ⁿ (never more than Max), with random jitter of up to half of it. A
// standby that answers with the leader's URL is not waited out: the client
// dials that leader at once (once in a row, then backs off as usual); from
// an https BaseURL it follows only an https leader.
type Backoff struct {
	Min time.Duration // default 200ms
	Max time.Duration // default 30s
}

// Config describes a Client.
type Config struct {
	// BaseURL is the funduq broker node's http(s) URL. Tickets are fetched
	// from {BaseURL}/tickets; the link is {BaseURL with http→ws,
	// https→wss}/ws/provider (a path prefix is kept; a query or fragment
	// is dropped). It may not carry userinfo: a proxy's credentials go in
	// HTTPClient and Dialer.
	BaseURL string
	// Signer is the provider's identity; the provider is its public key.
	Signer *identity.Signer
	// FunduqKey optionally pins funduq's public key (64 lowercase hex). When
	// set, the key POST /tickets names must equal it before anything is signed.
	FunduqKey string
	// MaxConcurrentRuns is the declared capacity, sent in hello. nil declares
	// no limit, and then the client never declines for room.
	MaxConcurrentRuns *int
	// ProviderName is an optional display label for the key, at most
	// MaxProviderNameBytes.
	ProviderName string
	// Agents is the full roster this client serves (at least one).
	Agents []Agent
	// SerializePerThread runs one active turn per conversation: runs of one
	// thread are handled one at a time, in arrival order, while different
	// threads run side by side — the off-the-shelf form of a provider's own
	// turn-taking. Queued runs count against MaxConcurrentRuns.
	SerializePerThread bool
	// Logger receives the client's logs; nil means slog.Default().
	Logger *slog.Logger
	// Dialer dials the link; nil means a dialer with a 10 s handshake
	// timeout that honours the proxy environment.
	Dialer *websocket.Dialer
	// HTTPClient posts to /tickets; nil means a private client with a 10 s
	// timeout whose idle connections are closed when Run returns.
	HTTPClient *http.Client
	// Backoff paces reconnects; zero fields take their defaults.
	Backoff Backoff
	// PingInterval is how often the client pings funduq; a link that shows
	// no sign of life (a frame, a pong, or a ping of funduq's own) for two
	// and a half intervals is dropped. Zero means DefaultPingInterval,
	// negative disables pings and the read deadline. While funduq is not
	// reading the link (see StallTimeout) pings go unanswered and only
	// funduq's own pings, sent every 30 s, show it is alive, so only an
	// interval above 12 s (two and a half of them cover 30 s) keeps such a
	// link for StallTimeout.
	PingInterval time.Duration
	// StallTimeout is how long one write (a frame, a ping or a pong) may
	// wait for funduq to take it before the link is dropped. funduq stops
	// reading a link whose events it cannot store yet (its database is slow
	// or down) until its writes catch up, so this is how long such an
	// outage may last without losing the link and the runs it holds. A
	// funduq that is gone is still noticed by PingInterval. Zero means
	// DefaultStallTimeout; negative lets a write wait as long as the link
	// lives.
	StallTimeout time.Duration
	// Retention is how long a run's frames (its events and its finish) are
	// kept after its finish was written. A frame written to a link that then
	// dies may never have been stored, so after a reconnect the client
	// announces again each run it finished within Retention whose finish
	// funduq has not confirmed (see the package doc) and resends its frames
	// (funduq drops what it already stored); and a run offered again after
	// it finished is answered from them instead of being handled twice. A
	// run that finished paused (an interrupt outcome, or a tool call left
	// unanswered) is resent before
	// the link registers instead, where funduq takes it only for a run it
	// still holds for the lost link: it may have reopened the run since
	// (design.md D7). At most MaxBufferedFrames frames
	// are kept per run and MaxRetainedRuns finished runs, oldest first
	// forgotten. Zero means DefaultRetention; negative forgets a run once
	// its finish is written.
	Retention time.Duration
}

// Client serves Config.Agents on one funduq link at a time. Build it with New
// and start it with Run.
type Client struct {
	cfg          Config
	base         *url.URL
	log          *slog.Logger
	agents       map[string]*Agent
	maxRuns      int                 // 0 = unlimited
	registerMsg  []byte              // the whole roster's register
	regs         []wire.Registration // the whole roster, in Config order
	httpClient   *http.Client
	ownTransport *http.Transport
	dialer       *websocket.Dialer
	pingInterval time.Duration // 0 = disabled
	stallTimeout time.Duration // 0 = writes wait as long as the link lives
	maxBuffered  int           // MaxBufferedFrames; lowered by tests
	retention    time.Duration // 0 = finished runs are not retained
	maxRetained  int           // MaxRetainedRuns; lowered by tests
	syncSettle   time.Duration // defaultSyncSettle; lowered by tests
	now          func() time.Time

	running   atomic.Bool
	connected atomic.Bool
	// replaced: funduq said a newer process of this key took over every
	// agent this client serves; it finishes what it holds and stops.
	replaced atomic.Bool
	// registerRefused: funduq refused register for good (ErrRegisterRefused);
	// as when replaced, the client finishes what it holds and stops.
	registerRefused atomic.Bool
	ready           chan struct{}
	readyOnce       sync.Once

	// handlers counts handler and thread-queue goroutines; Run waits for it.
	handlers sync.WaitGroup

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every state change
	runCtx   context.Context
	link     *link // the registered link, nil between links
	runs     map[string]*runState
	inFlight int // accepted runs whose finish is not yet queued
	active   int // live handler/thread-queue goroutines
	outbox   []*outFrame
	writing  *outFrame // the outbox head the link's writer is writing
	// tried is the outbox head a writer began to write and that was not
	// written whole yet: still being written, or its write failed.
	// funduq may have closed the link over it (endOversizedRun).
	tried        *outFrame
	threadQueues map[string]*threadQueue
	// retained holds finished runs (finish written) for Retention, in
	// retainedOrder by the time their finish was written.
	retained      map[string]*runState
	retainedOrder []*runState
	// taken: agents another process of this key took over, left out of
	// every register until funduq says they are free again (taken.go).
	taken map[string]bool
}

// New validates cfg and builds a Client. It does not connect.
func New(cfg Config) (*Client, error) {
	base, err := parseBaseURL(cfg.BaseURL)
	if err != nil {
		return nil, err
	}
	if cfg.Signer == nil {
		return nil, errors.New("provider: Config.Signer is required")
	}
	if cfg.FunduqKey != "" {
		if _, err := identity.ParsePublicKey(cfg.FunduqKey); err != nil {
			return nil, fmt.Errorf("provider: Config.FunduqKey: %w", err)
		}
	}
	maxRuns := 0
	if cfg.MaxConcurrentRuns != nil {
		if *cfg.MaxConcurrentRuns < 1 {
			return nil, fmt.Errorf("provider: Config.MaxConcurrentRuns must be at least 1 (nil declares no limit), got %d", *cfg.MaxConcurrentRuns)
		}
		maxRuns = *cfg.MaxConcurrentRuns
	}
	if strings.ContainsRune(cfg.ProviderName, 0) {
		return nil, errors.New("provider: Config.ProviderName holds a NUL character, which funduq cannot store")
	}
	if n := len(cfg.ProviderName); n > MaxProviderNameBytes {
		// funduq refuses such a register for good: refused here rather
		// than registered in vain by Run forever.
		return nil, fmt.Errorf("provider: Config.ProviderName is %d bytes, over funduq's limit of %d", n, MaxProviderNameBytes)
	}
	agents, regs, err := checkAgents(cfg.Agents)
	if err != nil {
		return nil, err
	}
	registerMsg, err := wire.Marshal(wire.Register{Type: wire.TypeRegister, Agents: regs, ProviderName: cfg.ProviderName})
	if err != nil {
		return nil, fmt.Errorf("provider: encoding register: %w", err)
	}
	if cfg.Backoff.Min <= 0 {
		cfg.Backoff.Min = 200 * time.Millisecond
	}
	if cfg.Backoff.Max <= 0 {
		cfg.Backoff.Max = 30 * time.Second
	}
	if cfg.Backoff.Max < cfg.Backoff.Min {
		cfg.Backoff.Max = cfg.Backoff.Min
	}
	c := &Client{
		cfg:          cfg,
		base:         base,
		log:          cfg.Logger,
		agents:       agents,
		maxRuns:      maxRuns,
		registerMsg:  registerMsg,
		regs:         regs,
		maxBuffered:  MaxBufferedFrames,
		httpClient:   cfg.HTTPClient,
		dialer:       cfg.Dialer,
		ready:        make(chan struct{}),
		changed:      make(chan struct{}),
		runs:         make(map[string]*runState),
		threadQueues: make(map[string]*threadQueue),
		retained:     make(map[string]*runState),
		maxRetained:  MaxRetainedRuns,
		syncSettle:   defaultSyncSettle,
		now:          time.Now,
	}
	switch {
	case cfg.Retention == 0:
		c.retention = DefaultRetention
	case cfg.Retention > 0:
		c.retention = cfg.Retention
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	c.log = c.log.With("provider_key", cfg.Signer.PublicKeyHex())
	if c.httpClient == nil {
		c.ownTransport = http.DefaultTransport.(*http.Transport).Clone()
		c.httpClient = &http.Client{Timeout: handshakeTimeout, Transport: c.ownTransport}
	}
	// POST /tickets follows no redirect: Go's client would resend it as a
	// GET, and funduq's answer to that (405) hid the 301 a load balancer
	// with a certificate gives plain HTTP (fetchTicket reports it). A copy,
	// so a caller's own client is left as it was.
	hc := *c.httpClient
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c.httpClient = &hc
	if c.dialer == nil {
		c.dialer = &websocket.Dialer{Proxy: http.ProxyFromEnvironment, HandshakeTimeout: handshakeTimeout}
	}
	switch {
	case cfg.PingInterval == 0:
		c.pingInterval = DefaultPingInterval
	case cfg.PingInterval > 0:
		c.pingInterval = cfg.PingInterval
	}
	switch {
	case cfg.StallTimeout == 0:
		c.stallTimeout = DefaultStallTimeout
	case cfg.StallTimeout > 0:
		c.stallTimeout = cfg.StallTimeout
	}
	return c, nil
}

func parseBaseURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, errors.New("provider: Config.BaseURL is required")
	}
	// The errors do not repeat raw: it may hold a password.
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("provider: Config.BaseURL does not parse: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("provider: Config.BaseURL must be an http(s) URL with a host, got %q", u.Redacted())
	}
	if u.User != nil {
		// The link's dialer refuses a URL with userinfo, so such a client
		// could never connect (it retried forever, logging the password
		// with every attempt). Credentials for a proxy in front of funduq
		// go in HTTPClient and Dialer.
		return nil, fmt.Errorf("provider: Config.BaseURL must not carry userinfo (%s); give a proxy's credentials to HTTPClient and Dialer", u.Redacted())
	}
	u.RawQuery, u.Fragment = "", ""
	return u, nil
}

// Ready is closed the first time the client is registered on a link.
func (c *Client) Ready() <-chan struct{} { return c.ready }

// Connected reports whether the client is registered on a live link now.
func (c *Client) Connected() bool { return c.connected.Load() }

// Run connects and serves until ctx ends, reconnecting with exponential
// backoff and jitter after any failure (each one is logged). When ctx ends,
// the client takes its agents out of service on the link (a deleteAgent
// each; an offer still arriving is declined behind it), every handler's context is
// cancelled, and Run waits — in all at most 5 s while the link is up — for
// funduq's answers, for the handlers to return and for their last frames
// to be written. A run whose handler has not returned by then is ended by
// the client, with a RUN_ERROR ("the provider shut down before the agent
// finished this run") and its finish, written within a further second, so
// its caller gets a typed end and funduq counts nothing against the key
// (leaving holding it would count abandoned). Then Run closes the link and
// returns nil once every goroutine it started has stopped: a handler that
// ignores its context keeps Run waiting until it returns. It returns
// ErrAlreadyRunning if the client is already running.
//
// When funduq says a newer process of the same key took over every agent
// this client serves (a rolling deploy), the client does not register
// again: it finishes and reports the runs it holds (over that link, or
// links that register nothing should it close), and Run returns
// ErrReplaced once none is left.
func (c *Client) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	defer c.running.Store(false)
	c.mu.Lock()
	c.runCtx = ctx
	c.taken = nil // a new start serves its whole roster (taken.go)
	c.mu.Unlock()

	var redirect *url.URL
	attempt := 0
	followed := false // the last attempt went to a leader a standby named
	c.replaced.Store(false)
	c.registerRefused.Store(false)
	stopped, refusedErr := error(nil), error(nil)
	for ctx.Err() == nil {
		base := c.base
		if redirect != nil {
			base, redirect = redirect, nil
		}
		registered, next, err := c.session(ctx, base)
		if ctx.Err() != nil {
			break
		}
		if c.replaced.Load() && c.holdsNothing() {
			// A newer process of this key serves the agents now, and
			// every run this one held is finished and confirmed: stop,
			// rather than register again and take the agents back
			// (design.md §Two processes of one key).
			c.log.Info("provider replaced by a newer process of its key; stopping")
			stopped = ErrReplaced
			break
		}
		if errors.Is(err, ErrRegisterRefused) {
			// The same register would be refused again: stop, so that the
			// author's process exits saying why rather than serving
			// nothing while it looks alive. Nothing was registered on
			// this link, so no run was offered on it; runs held from an
			// earlier link (a broker restarted with lower limits) are
			// finished and reported first on links that register
			// nothing, as a replaced client's are (D5).
			refusedErr = err
			c.registerRefused.Store(true)
		}
		if refusedErr != nil && c.holdsNothing() {
			c.log.Error("funduq refused register for good; stopping", "err", refusedErr)
			stopped = refusedErr
			break
		}
		if registered {
			attempt = 0
		}
		redirect = next
		if redirect != nil && c.base.Scheme == "https" && redirect.Scheme != "https" {
			// An https BaseURL chose TLS for the ticket, the proof and every
			// run's input and output; a standby's answer does not take the
			// link off it (an advertised URL left at http behind a TLS
			// proxy, or a node that lies).
			c.log.Warn("a standby named a leader over plain http; not leaving https for it (set FUNDUQ_ADVERTISE_URL to its https URL)",
				"url", base.String(), "named", redirect.String())
			redirect = nil
		}
		// A standby that named the leader is followed at once, once in a
		// row: the runs held through the failover wait for this client
		// only FUNDUQ_PROVIDER_GRACE, no longer than the backoff's cap
		// (design.md D7). Two nodes naming each other
		// still back off.
		var delay time.Duration
		if redirect != nil && !followed && redirect.String() != base.String() {
			followed = true
		} else {
			// A key past its tickets per minute is not asked sooner
			// than funduq said: it would only be refused again.
			delay = max(c.cfg.Backoff.delay(attempt), retryAfter(err))
			attempt++
			followed = false
		}
		attrs := []any{"err", err, "retry_in", delay.String(), "url", base.String()}
		if redirect != nil {
			attrs = append(attrs, "next", redirect.String())
		}
		c.log.Warn("provider link failed; reconnecting", attrs...)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
	c.handlers.Wait()
	c.mu.Lock()
	if n := len(c.outbox); n > 0 {
		c.log.Warn("provider stopped with frames it could not deliver", "frames", n)
	}
	c.outbox, c.tried = nil, nil
	c.runs = make(map[string]*runState)
	c.threadQueues = make(map[string]*threadQueue)
	c.retained = make(map[string]*runState)
	c.retainedOrder = nil
	c.inFlight = 0
	c.notifyLocked()
	c.mu.Unlock()
	if c.ownTransport != nil {
		c.ownTransport.CloseIdleConnections()
	}
	return stopped
}

// holdsNothing reports whether this client holds no run, has nothing left
// to write, and no finished run whose finish funduq has not confirmed.
func (c *Client) holdsNothing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.runs) > 0 || len(c.outbox) > 0 {
		return false
	}
	for _, rs := range c.retainedOrder {
		if c.retained[rs.run.ID] == rs && !rs.paused && !rs.confirmed {
			return false
		}
	}
	return true
}

// notifyLocked wakes everyone waiting on a state change. c.mu must be held.
func (c *Client) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// spawnLocked starts f as a handler goroutine owned by Run. c.mu must be held.
func (c *Client) spawnLocked(f func()) {
	c.handlers.Add(1)
	c.active++
	go func() {
		defer c.handlers.Done()
		defer func() {
			c.mu.Lock()
			c.active--
			c.notifyLocked()
			c.mu.Unlock()
		}()
		f()
	}()
}

// quote renders s as a JSON string.
func quote(s string) string {
	b, _ := json.Marshal(s) // a string always marshals
	return string(b)
}

// endpoint joins base's path with suffix, keeping a path prefix.
func endpoint(base *url.URL, suffix string) *url.URL {
	u := *base
	u.Path = strings.TrimSuffix(u.Path, "/") + suffix
	u.RawPath = ""
	return &u
}
