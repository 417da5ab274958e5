package provider

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/wire"
)

// unavailableError is a 503 from a broker node that is not the leader; leader
// is the node it named, if any.
type unavailableError struct {
	what   string
	leader *url.URL
	body   string
}

func (e *unavailableError) Error() string {
	msg := e.what + ": 503 Service Unavailable"
	if e.leader != nil {
		msg += " (leader " + e.leader.String() + ")"
	} else if e.body != "" {
		msg += ": " + e.body
	}
	return msg
}

// retryLaterError is a refusal that said when to ask again: a key past its
// tickets per minute (429 with Retry-After, the rest of funduq's minute);
// Run waits at least that long before the next attempt. A 503's
// Retry-After (a standby, a takeover under way) is not waited out: the
// backoff starts shorter, and a provider back soon after a failover keeps
// the runs it holds (design.md D7).
type retryLaterError struct {
	error
	after time.Duration
}

func (e *retryLaterError) Unwrap() error { return e.error }

// maxRetryAfter bounds the wait a Retry-After may ask for: funduq asks for
// at most a minute (the rest of a ticket minute); a proxy's longer value
// must not keep a provider away for an hour.
const maxRetryAfter = 2 * time.Minute

// withRetryAfter wraps err with the wait h's Retry-After asks for, if any
// (delay-seconds or an HTTP date).
func withRetryAfter(err error, h http.Header) error {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return err
	}
	var after time.Duration
	if secs, perr := strconv.Atoi(v); perr == nil {
		after = time.Duration(secs) * time.Second
	} else if at, perr := http.ParseTime(v); perr == nil {
		after = time.Until(at)
	}
	if after <= 0 {
		return err
	}
	return &retryLaterError{error: err, after: min(after, maxRetryAfter)}
}

// retryAfter is the wait the refusal err carries, or 0.
func retryAfter(err error) time.Duration {
	var rl *retryLaterError
	if errors.As(err, &rl) {
		return rl.after
	}
	return 0
}

// leaderKeys are the fields a standby's 503 body may name the leader in.
var leaderKeys = []string{"leader", "leaderUrl", "leaderURL", "leader_url", "advertiseUrl", "advertiseURL", "url"}

// leaderFromBody reads the leader's URL out of a 503 JSON body, or nil.
func leaderFromBody(body []byte) *url.URL {
	var obj map[string]json.RawMessage
	if json.Unmarshal(body, &obj) != nil {
		return nil
	}
	for _, k := range leaderKeys {
		raw, ok := obj[k]
		if !ok {
			continue
		}
		var s string
		if json.Unmarshal(raw, &s) != nil {
			var nested map[string]json.RawMessage
			if json.Unmarshal(raw, &nested) != nil {
				continue
			}
			for _, nk := range []string{"url", "advertiseUrl", "advertiseURL"} {
				if json.Unmarshal(nested[nk], &s) == nil && s != "" {
					break
				}
			}
		}
		if u := leaderURL(s); u != nil {
			return u
		}
	}
	return nil
}

// leaderURL turns an advertised URL into a base URL (ws→http, wss→https,
// a trailing /ws/provider dropped), or nil if it is not one.
func leaderURL(s string) *url.URL {
	if s == "" {
		return nil
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return nil
	}
	switch u.Scheme {
	case "http", "https":
	case "ws":
		u.Scheme = "http"
	case "wss":
		u.Scheme = "https"
	default:
		return nil
	}
	u.RawQuery, u.Fragment, u.RawPath = "", "", ""
	if p, ok := strings.CutSuffix(u.Path, "/ws/provider"); ok {
		u.Path = p
	}
	return u
}

// wsURL derives the link URL from a base URL: http→ws, https→wss, plus
// /ws/provider after any path prefix.
func wsURL(base *url.URL) *url.URL {
	u := endpoint(base, "/ws/provider")
	switch u.Scheme {
	case "https":
		u.Scheme = "wss"
	default:
		u.Scheme = "ws"
	}
	return u
}

// fetchTicket is step 0: POST {base}/tickets.
func (c *Client) fetchTicket(ctx context.Context, base *url.URL) (wire.TicketResponse, ed25519.PublicKey, error) {
	var tr wire.TicketResponse
	body, err := wire.Marshal(wire.TicketRequest{PublicKey: c.cfg.Signer.PublicKeyHex()})
	if err != nil {
		return tr, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, handshakeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint(base, "/tickets").String(), bytes.NewReader(body))
	if err != nil {
		return tr, nil, fmt.Errorf("POST /tickets: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := c.httpClient.Do(req)
	if err != nil {
		return tr, nil, fmt.Errorf("POST /tickets: %w", err)
	}
	defer resp.Body.Close()
	respBody, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return tr, nil, fmt.Errorf("POST /tickets: reading the answer: %w", err)
	}
	switch resp.StatusCode {
	case http.StatusOK, http.StatusCreated:
	case http.StatusServiceUnavailable:
		return tr, nil, &unavailableError{what: "POST /tickets", leader: leaderFromBody(respBody), body: snippet(respBody)}
	case http.StatusTooManyRequests:
		return tr, nil, withRetryAfter(fmt.Errorf("POST /tickets: %s: %s", resp.Status, snippet(respBody)), resp.Header)
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return tr, nil, fmt.Errorf("POST /tickets: %s to %q: funduq is not at BaseURL %s; set BaseURL to the URL it names "+
			"(a load balancer with a certificate sends plain HTTP to HTTPS)", resp.Status, resp.Header.Get("Location"), base)
	default:
		return tr, nil, fmt.Errorf("POST /tickets: %s: %s", resp.Status, snippet(respBody))
	}
	if err := json.Unmarshal(respBody, &tr); err != nil {
		return tr, nil, fmt.Errorf("POST /tickets: answer is not a ticket: %w", err)
	}
	if tr.Ticket == "" {
		return tr, nil, errors.New("POST /tickets: answer has no ticket")
	}
	// The pin is checked here, before the ticket is signed over.
	if c.cfg.FunduqKey != "" && tr.FunduqPublicKey != c.cfg.FunduqKey {
		return tr, nil, fmt.Errorf("%w: POST /tickets named %q, pinned %s", ErrPinMismatch, tr.FunduqPublicKey, c.cfg.FunduqKey)
	}
	fk, err := identity.ParsePublicKey(tr.FunduqPublicKey)
	if err != nil {
		return tr, nil, fmt.Errorf("POST /tickets: funduqPublicKey: %w", err)
	}
	return tr, fk, nil
}

// snippet is a short printable excerpt of a response body for an error.
func snippet(b []byte) string {
	const max = 200
	b = bytes.TrimSpace(b)
	if len(b) > max {
		return string(b[:max]) + "…"
	}
	return string(b)
}

// randomHex returns n random bytes as lowercase hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}

// connect performs the whole ceremony against base — ticket, pin, proof,
// dial, hello, welcome, register, registered — and returns the registered
// connection. The frames of early are written between welcome and register
// (resent paused rounds, pausedRoundsLocked); refused gets the runs funduq
// refused a report of before its registered.
func (c *Client) connect(ctx context.Context, base *url.URL, register bool, early [][]byte, refused map[string]bool) (*websocket.Conn, error) {
	tr, fk, err := c.fetchTicket(ctx, base)
	if err != nil {
		return nil, err
	}
	nonce := randomHex(16)
	proof := c.cfg.Signer.Sign(identity.ProviderConnectPayload(tr.FunduqPublicKey, tr.Ticket, nonce))

	target := wsURL(base)
	conn, resp, err := c.dialer.DialContext(ctx, target.String(), nil)
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusServiceUnavailable {
			var body []byte
			if resp.Body != nil {
				body, _ = io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			}
			return nil, &unavailableError{what: "dial " + target.String(), leader: leaderFromBody(body), body: snippet(body)}
		}
		if resp != nil {
			return nil, fmt.Errorf("dial %s: %s: %w", target, resp.Status, err)
		}
		return nil, fmt.Errorf("dial %s: %w", target, err)
	}
	conn.SetReadLimit(maxFrameBytes)
	// ctx ending aborts a handshake blocked on the network.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	if err := c.handshake(conn, tr, fk, nonce, proof, register, early, refused); err != nil {
		stop()
		refuse(conn, err)
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, err
	}
	if !stop() {
		conn.Close()
		return nil, context.Cause(ctx)
	}
	return conn, nil
}

// refuse closes conn after a failed handshake, telling funduq why.
func refuse(conn *websocket.Conn, err error) {
	code := websocket.ClosePolicyViolation
	reason := err.Error()
	if len(reason) > 120 { // a close reason must fit a 125-byte control frame
		reason = strings.ToValidUTF8(reason[:120], "")
	}
	_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(time.Second))
	conn.Close()
}

// handshake runs hello → welcome → register → registered on conn; without
// register, only hello → welcome (a replaced client finishing its runs).
// The frames of early go out just before register; a refusal of one of
// them, read before registered, is noted in refused.
func (c *Client) handshake(conn *websocket.Conn, tr wire.TicketResponse, fk ed25519.PublicKey, nonce, proof string, register bool, early [][]byte, refused map[string]bool) error {
	version := wire.Version
	hello := wire.Hello{
		Type:              wire.TypeHello,
		Version:           &version,
		PublicKey:         c.cfg.Signer.PublicKeyHex(),
		Ticket:            tr.Ticket,
		Nonce:             nonce,
		Proof:             proof,
		MaxConcurrentRuns: c.cfg.MaxConcurrentRuns,
	}
	if err := writeFrame(conn, hello); err != nil {
		return fmt.Errorf("sending hello: %w", err)
	}

	typ, raw, err := readHandshakeFrame(conn)
	if err != nil {
		return fmt.Errorf("waiting for welcome: %w", err)
	}
	if typ != wire.TypeWelcome {
		return fmt.Errorf("%w: first frame is %q, not welcome", ErrBadWelcome, typ)
	}
	var w wire.Welcome
	if err := json.Unmarshal(raw, &w); err != nil {
		return fmt.Errorf("%w: %v", ErrBadWelcome, err)
	}
	if w.FunduqPublicKey != "" && w.FunduqPublicKey != tr.FunduqPublicKey {
		return fmt.Errorf("%w: welcome names key %q, POST /tickets named %s", ErrBadWelcome, w.FunduqPublicKey, tr.FunduqPublicKey)
	}
	if err := identity.Verify(fk, identity.FunduqConnectPayload(tr.Ticket, nonce), w.Answer); err != nil {
		return fmt.Errorf("%w: answer: %v", ErrBadWelcome, err)
	}
	if !register {
		_ = conn.SetReadDeadline(time.Time{})
		return nil
	}

	for _, f := range early {
		if err := writeRaw(conn, f); err != nil {
			return fmt.Errorf("resending a paused round: %w", err)
		}
	}
	registerMsg, _ := c.registerFrame()
	if err := writeRaw(conn, registerMsg); err != nil {
		return fmt.Errorf("sending register: %w", err)
	}
	for {
		typ, raw, err = readHandshakeFrame(conn)
		if err != nil {
			return fmt.Errorf("waiting for registered: %w", err)
		}
		if typ != wire.TypeError || len(early) == 0 {
			break
		}
		var e wire.Error
		if json.Unmarshal(raw, &e) != nil || e.RunID == "" || !isRefusal(e.Message) {
			break
		}
		// The expected answer to a paused round funduq has (its run
		// reopened or ended since): it is not resent again. Held by
		// another link of the key is no such answer: a lost link funduq
		// has not seen go yet, whose run passes to this one.
		c.log.Debug("funduq refused a resent paused round; ignored", "run_id", e.RunID, "message", e.Message)
		if !strings.Contains(e.Message, "held by another link") {
			refused[e.RunID] = true
		}
	}
	switch typ {
	case wire.TypeRegistered:
		var r wire.Registered
		if err := json.Unmarshal(raw, &r); err != nil {
			return fmt.Errorf("%w: %v", ErrNotRegistered, err)
		}
		c.mu.Lock()
		taken := maps.Clone(c.taken)
		c.mu.Unlock()
		for name := range c.agents {
			if !taken[name] && !slices.Contains(r.Names, name) {
				c.log.Warn("registered does not list an agent this client serves", "agent", name, "names", r.Names)
			}
		}
	case wire.TypeError:
		var e wire.Error
		_ = json.Unmarshal(raw, &e)
		c.log.Error("funduq refused register", "message", e.Message, "name", e.Name, "code", e.Code)
		if refusedForGood(e) {
			return fmt.Errorf("%w: %s", ErrRegisterRefused, e.Message)
		}
		return fmt.Errorf("%w: funduq answered error %q", ErrNotRegistered, e.Message)
	default:
		return fmt.Errorf("%w: got %q", ErrNotRegistered, typ)
	}
	_ = conn.SetReadDeadline(time.Time{})
	return nil
}

// registerLimits are the broker settings a register can be refused past.
// funduq names the setting in such a refusal (design.md §The provider wire,
// "Admission", and "The frame limit"), and the same register is refused
// past it again however often it is sent: only the operator raising the
// setting or the author shrinking the agents helps. The served-agents cap
// (FUNDUQ_MAX_SERVED_AGENTS) is not one: it frees as other providers leave,
// and funduq says "retry later".
var registerLimits = []string{
	"(FUNDUQ_MAX_AGENTS_PER_REGISTER)",
	"(FUNDUQ_MAX_AGENT_DESCRIPTION_BYTES)",
	"(FUNDUQ_MAX_AGENT_CARD_BYTES)",
	"(FUNDUQ_MAX_REGISTER_BYTES)",
	"(FUNDUQ_MAX_FRAME_BYTES)",
}

// refusedForGood reports whether funduq's error answering a register says
// no retry of it can succeed. Its code says so (design.md §The provider
// wire, "Refusal codes"): register_refused is for good, retry_later is
// not. A broker older than the code sends none, and a code this SDK does
// not know may be one added since: then the text decides, as it did
// before the code — a refusal naming one of registerLimits is for good,
// any other is retried. The refusals New can foresee (a name off the
// pattern, a duplicate, a NUL, a card that is not an object, a long
// ProviderName) never reach funduq.
func refusedForGood(e wire.Error) bool {
	switch e.Code {
	case wire.CodeRegisterRefused:
		return true
	case wire.CodeRetryLater:
		return false
	}
	for _, s := range registerLimits {
		if strings.Contains(e.Message, s) {
			return true
		}
	}
	return false
}

// readHandshakeFrame reads one text frame within handshakeTimeout.
func readHandshakeFrame(conn *websocket.Conn) (string, []byte, error) {
	_ = conn.SetReadDeadline(time.Now().Add(handshakeTimeout))
	mt, raw, err := conn.ReadMessage()
	if err != nil {
		return "", nil, err
	}
	if mt != websocket.TextMessage {
		return "", nil, errors.New("funduq sent a binary frame")
	}
	typ, ok := wire.PeekType(raw)
	if !ok {
		return "", nil, errors.New("funduq sent an unparseable frame")
	}
	return typ, raw, nil
}

func writeFrame(conn *websocket.Conn, v any) error {
	b, err := wire.Marshal(v)
	if err != nil {
		return err
	}
	return writeRaw(conn, b)
}

func writeRaw(conn *websocket.Conn, b []byte) error {
	return writeWithin(conn, b, time.Now().Add(writeTimeout))
}

// writeWithin writes one text frame by deadline (zero: no deadline).
func writeWithin(conn *websocket.Conn, b []byte, deadline time.Time) error {
	_ = conn.SetWriteDeadline(deadline)
	return conn.WriteMessage(websocket.TextMessage, b)
}
