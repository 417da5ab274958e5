// Package handshake is the server side of the provider link's opening (wire
// v4, design.md §The provider wire) on an already upgraded WebSocket: read
// the provider's hello, claim its ticket, check its proof and answer with a
// welcome. Every refusal is a WebSocket close with code 1008 (policy
// violation) and a reason a person can act on; there is no error frame.
package handshake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/broker-node/tickets"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/strictjson"
	"github.com/funduq/funduq-go/core/wire"
)

// DefaultHelloTimeout is how long Accept waits for the hello when
// Config.HelloTimeout is zero.
const DefaultHelloTimeout = 5 * time.Second

// MaxHelloBytes bounds the hello message; a larger first message is refused
// without being read into memory.
const MaxHelloBytes = 64 << 10

// MaxReasonBytes is the longest close reason a WebSocket close frame carries
// (125-byte control payload less the 2-byte code).
const MaxReasonBytes = 123

// closeGrace bounds writing a close frame and waiting for the peer's reply.
const closeGrace = time.Second

// ErrRefused matches every *RefusedError under errors.Is.
var ErrRefused = errors.New("handshake: refused")

// RefusedError is a hello this funduq turned down. Reason is exactly the close
// reason sent to the peer with code 1008; Detail, when set, is what the
// operator's log adds and the peer is not told.
type RefusedError struct {
	Reason string
	Detail string
}

func (e *RefusedError) Error() string {
	if e.Detail != "" {
		return "handshake: refused: " + e.Reason + " (" + e.Detail + ")"
	}
	return "handshake: refused: " + e.Reason
}

// Is makes errors.Is(err, ErrRefused) hold.
func (e *RefusedError) Is(target error) bool { return target == ErrRefused }

// TicketClaimer spends a ticket for a key; *tickets.Store is one. Claim
// returns an error matching tickets.ErrUnknownTicket or
// tickets.ErrForeignTicket for a ticket it will not honour (a foreign ticket
// must be left unspent); any other error is treated as the store being down.
type TicketClaimer interface {
	Claim(ctx context.Context, ticket, publicKeyHex string) error
}

// Config is what Accept needs.
type Config struct {
	// Funduq is this funduq's identity: the proof must name its key as the
	// recipient, and it signs the welcome's answer.
	Funduq *identity.Signer
	// Tickets claims the hello's ticket.
	Tickets TicketClaimer
	// HelloTimeout is how long to wait for the hello; DefaultHelloTimeout if zero.
	// It also bounds writing the welcome.
	HelloTimeout time.Duration
	// Now is the clock deadlines are set from; time.Now if nil.
	Now func() time.Time
}

// Result is an accepted hello.
type Result struct {
	// PublicKey is the provider's key (64 lowercase hex chars), proven.
	PublicKey string
	// MaxConcurrentRuns is the provider's declared limit; nil means none.
	MaxConcurrentRuns *int
	// Ticket (now spent) and Nonce are the hello's.
	Ticket, Nonce string
}

// Close reasons. Tests and operators read these; keep each within MaxReasonBytes.
const (
	reasonNoHello      = "no hello frame"
	reasonNotHello     = "first frame must be hello"
	reasonTooLarge     = "hello frame too large"
	reasonNoVersion    = "hello has no version: this funduq speaks wire v4, the ticket handshake (POST /tickets, then hello)"
	reasonNoPublicKey  = "hello needs a publicKey — the provider's Ed25519 key as 64 lowercase hex chars"
	reasonNoTicket     = "hello needs a ticket — POST /tickets issues one"
	reasonNoNonce      = "hello needs a nonce — a fresh random string of the provider's choosing"
	reasonNoProof      = "hello needs a proof — the provider's signature over the connect payload"
	reasonMaxRuns      = "maxConcurrentRuns must be a positive integer or null"
	reasonNonceColon   = "nonce must not contain ':'"
	reasonUnknown      = "unknown or expired ticket"
	reasonBadProof     = "bad proof"
	reasonStoreDown    = "ticket store unavailable; try again shortly"
	reasonShuttingDown = "funduq is going away"
)

// Accept runs the handshake on conn, which must be freshly upgraded with
// nothing read from or written to it yet.
//
// On success the welcome has been written as the first frame, conn's read and
// write deadlines are cleared, and the caller owns conn. On any error Accept
// has closed conn: after a close frame with code 1008 and the reason when it
// refused the hello (the error is a *RefusedError), 1013 when the ticket store
// failed, 1001 when ctx ended, and without one when the peer left or the
// connection failed.
//
// The checks run in the reference's order but one: the proof is checked
// before the ticket is claimed, so a hello with a bad proof never spends a
// ticket, and a ticket presented by another key is left unspent too.
func Accept(ctx context.Context, conn *websocket.Conn, cfg Config) (Result, error) {
	if cfg.Funduq == nil || cfg.Tickets == nil {
		conn.Close()
		return Result{}, errors.New("handshake: Config needs Funduq and Tickets")
	}
	timeout := cfg.HelloTimeout
	if timeout <= 0 {
		timeout = DefaultHelloTimeout
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}

	data, err := readHello(ctx, conn, now().Add(timeout))
	if err != nil {
		var refused *RefusedError
		switch {
		case ctx.Err() != nil:
			closeWith(conn, now, websocket.CloseGoingAway, reasonShuttingDown)
			return Result{}, fmt.Errorf("handshake: waiting for hello: %w", context.Cause(ctx))
		case errors.As(err, &refused):
			return Result{}, refuse(conn, now, refused.Reason)
		default:
			conn.Close()
			return Result{}, fmt.Errorf("handshake: peer left before hello: %w", err)
		}
	}
	if err := conn.SetReadDeadline(time.Time{}); err != nil {
		conn.Close()
		return Result{}, fmt.Errorf("handshake: %w", err)
	}

	res, proof, reason := parseHello(data)
	if reason != "" {
		return Result{}, refuse(conn, now, reason)
	}

	// The proof is checked before the ticket is claimed, unlike the
	// reference: claiming first let anyone who saw a ticket burn it by
	// naming its owner's key with any proof, which D11 rules out ("a
	// stranger who saw a ticket cannot burn it"). The proof depends only
	// on the hello, so nothing is learnt from the order.
	pub, _ := identity.ParsePublicKey(res.PublicKey) // checked by parseHello
	payload := identity.ProviderConnectPayload(cfg.Funduq.PublicKeyHex(), res.Ticket, res.Nonce)
	if identity.Verify(pub, payload, proof) != nil {
		return Result{}, refuse(conn, now, reasonBadProof)
	}

	switch err := cfg.Tickets.Claim(ctx, res.Ticket, res.PublicKey); {
	case err == nil:
	case errors.Is(err, tickets.ErrUnknownTicket):
		return Result{}, refuse(conn, now, reasonUnknown)
	case errors.Is(err, tickets.ErrForeignTicket):
		// Told exactly what an unknown ticket is told: the presenter is a
		// stranger to the ticket, and "issued to another key" would tell
		// it the ticket it saw is live (a refusal to a stranger says no
		// more than "unknown"). The log keeps the difference.
		_ = refuse(conn, now, reasonUnknown)
		return Result{}, &RefusedError{Reason: reasonUnknown, Detail: "the ticket was issued to another key, which may still use it"}
	case ctx.Err() != nil:
		closeWith(conn, now, websocket.CloseGoingAway, reasonShuttingDown)
		return Result{}, fmt.Errorf("handshake: claiming ticket: %w", context.Cause(ctx))
	default:
		closeWith(conn, now, websocket.CloseTryAgainLater, reasonStoreDown)
		return Result{}, fmt.Errorf("handshake: claiming ticket: %w", err)
	}

	welcome, err := json.Marshal(wire.Welcome{
		Type:            wire.TypeWelcome,
		FunduqPublicKey: cfg.Funduq.PublicKeyHex(),
		Answer:          cfg.Funduq.Sign(identity.FunduqConnectPayload(res.Ticket, res.Nonce)),
	})
	if err != nil { // cannot happen: three strings
		conn.Close()
		return Result{}, fmt.Errorf("handshake: welcome: %w", err)
	}
	if err := conn.SetWriteDeadline(now().Add(timeout)); err != nil {
		conn.Close()
		return Result{}, fmt.Errorf("handshake: %w", err)
	}
	if err := conn.WriteMessage(websocket.TextMessage, welcome); err != nil {
		conn.Close()
		return Result{}, fmt.Errorf("handshake: writing welcome: %w", err)
	}
	if err := conn.SetWriteDeadline(time.Time{}); err != nil {
		conn.Close()
		return Result{}, fmt.Errorf("handshake: %w", err)
	}
	return res, nil
}

// readHello reads the first message by deadline, or until ctx ends. A refusal
// comes back as a *RefusedError; any other error means the read failed.
func readHello(ctx context.Context, conn *websocket.Conn, deadline time.Time) ([]byte, error) {
	if err := conn.SetReadDeadline(deadline); err != nil {
		return nil, err
	}
	// ctx ending pulls the deadline in, which unblocks the read.
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(fired)
		_ = conn.SetReadDeadline(time.Unix(1, 0))
	})
	data, err := readFirst(conn)
	if !stop() {
		<-fired
	}
	if err != nil && isTimeout(err) && ctx.Err() == nil {
		return nil, &RefusedError{Reason: reasonNoHello}
	}
	return data, err
}

// isTimeout reports a read deadline passing. gorilla hides the net error
// behind its own type, which keeps Timeout but not the chain to
// os.ErrDeadlineExceeded, so both are checked.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

func readFirst(conn *websocket.Conn) ([]byte, error) {
	mt, r, err := conn.NextReader()
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(r, MaxHelloBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxHelloBytes {
		return nil, &RefusedError{Reason: reasonTooLarge}
	}
	if mt != websocket.TextMessage {
		return nil, &RefusedError{Reason: reasonNotHello}
	}
	return data, nil
}

// parseHello checks a hello in the reference's order and returns it with its
// proof, or the reason it is refused.
func parseHello(data []byte) (res Result, proof, reason string) {
	var obj map[string]json.RawMessage
	// An identity-bearing frame two JSON readers could read differently (a
	// repeated publicKey, invalid UTF-8) is not a hello (core/strictjson).
	if strictjson.Check(data, 8) != nil || json.Unmarshal(data, &obj) != nil || obj == nil {
		return Result{}, "", reasonNotHello
	}
	if t, ok := stringField(obj, "type"); !ok || t != wire.TypeHello {
		return Result{}, "", reasonNotHello
	}

	switch v, ok := obj["version"]; {
	case !ok || string(v) == "null":
		return Result{}, "", reasonNoVersion
	case !isInt(v, wire.Version):
		return Result{}, "", fmt.Sprintf("unsupported wire version %s; this funduq speaks v%d", clip(string(v), 32), wire.Version)
	}

	for _, f := range []struct {
		name, reason string
		dst          *string
	}{
		{"publicKey", reasonNoPublicKey, &res.PublicKey},
		{"ticket", reasonNoTicket, &res.Ticket},
		{"nonce", reasonNoNonce, &res.Nonce},
		{"proof", reasonNoProof, &proof},
	} {
		s, ok := stringField(obj, f.name)
		if !ok || s == "" {
			return Result{}, "", f.reason
		}
		*f.dst = s
	}

	if _, err := identity.ParsePublicKey(res.PublicKey); err != nil {
		return Result{}, "", badKeyReason(err)
	}

	if raw, ok := obj["maxConcurrentRuns"]; ok && string(raw) != "null" {
		n, err := strconv.ParseInt(string(raw), 10, 0)
		if err != nil || n <= 0 {
			return Result{}, "", reasonMaxRuns
		}
		m := int(n)
		res.MaxConcurrentRuns = &m
	}

	if strings.Contains(res.Nonce, ":") {
		return Result{}, "", reasonNonceColon
	}
	return res, proof, ""
}

// badKeyReason words identity's complaint about the hello's key (which says
// what is wrong without echoing the key) as a close reason.
func badKeyReason(err error) string {
	const base = "publicKey must be 64 lowercase hex chars"
	detail, ok := strings.CutPrefix(err.Error(), identity.ErrBadKey.Error()+": public key must be 64 lowercase hex chars: ")
	if !ok {
		return base
	}
	return clip(base+": "+detail, MaxReasonBytes)
}

// stringField reads obj[name] when it is a JSON string.
func stringField(obj map[string]json.RawMessage, name string) (string, bool) {
	raw, ok := obj[name]
	if !ok || len(raw) == 0 || raw[0] != '"' {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// isInt reports whether raw is the JSON integer want.
func isInt(raw json.RawMessage, want int64) bool {
	n, err := strconv.ParseInt(string(raw), 10, 64)
	return err == nil && n == want
}

// clip shortens s to at most n bytes, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return truncate(s, n-len("…")) + "…"
}

// truncate cuts s to at most n bytes without splitting a rune.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// refuse closes conn with 1008 and reason and returns the matching error.
func refuse(conn *websocket.Conn, now func() time.Time, reason string) error {
	reason = truncate(strings.ToValidUTF8(reason, "?"), MaxReasonBytes)
	closeWith(conn, now, websocket.ClosePolicyViolation, reason)
	return &RefusedError{Reason: reason}
}

// closeWith sends a close frame, waits briefly for the peer's own close so
// the frame is not lost to a reset, and closes the connection.
func closeWith(conn *websocket.Conn, now func() time.Time, code int, reason string) {
	deadline := now().Add(closeGrace)
	if conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), deadline) == nil {
		if conn.SetReadDeadline(deadline) == nil {
			for {
				if _, _, err := conn.NextReader(); err != nil {
					break
				}
			}
		}
	}
	conn.Close()
}
