package node_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/apierr"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/wire"
	"github.com/funduq/funduq-go/provider"
)

// linkURL is h's provider link endpoint.
func linkURL(h *nodetest.Harness) string {
	return "ws" + strings.TrimPrefix(h.URL, "http") + "/ws/provider"
}

// admitWith opens a link for k with ticket tk and returns it welcomed.
func admitWith(t *testing.T, h *nodetest.Harness, k *identity.Signer, tk, nonce string) *stranger {
	t.Helper()
	ws, resp, err := websocket.DefaultDialer.Dial(linkURL(h), nil)
	if err != nil {
		t.Fatalf("upgrade refused: %v", err)
	}
	resp.Body.Close()
	t.Cleanup(func() { _ = ws.Close() })
	s := &stranger{t: t, ws: ws, pub: k.PublicKeyHex()}
	if err := ws.WriteJSON(rawHello(h, k.PublicKeyHex(), tk, nonceOf(nonce), k)); err != nil {
		t.Fatal(err)
	}
	if typ, data := s.next(); typ != wire.TypeWelcome {
		t.Fatalf("hello answered %q: %s", typ, data)
	}
	return s
}

// upgradeRefusedFull dials the link endpoint and requires the refusal of
// a full pending bound: 503, Retry-After and the error body naming it.
func upgradeRefusedFull(t *testing.T, h *nodetest.Harness, what string) {
	t.Helper()
	ws, resp, err := websocket.DefaultDialer.Dial(linkURL(h), nil)
	if err == nil {
		_ = ws.Close()
		t.Fatalf("%s: the upgrade was admitted past FUNDUQ_MAX_PENDING_LINKS", what)
	}
	if resp == nil {
		t.Fatalf("%s: %v, no HTTP answer", what, err)
	}
	body, _ := io.ReadAll(resp.Body)
	var b apierr.Body
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		json.Unmarshal(body, &b) != nil || b.Error.Code != apierr.CodePendingLinksFull || !strings.Contains(b.Error.Message, "FUNDUQ_MAX_PENDING_LINKS") {
		t.Fatalf("%s: answered %d Retry-After %q %s; want 503 %s naming FUNDUQ_MAX_PENDING_LINKS",
			what, resp.StatusCode, resp.Header.Get("Retry-After"), body, apierr.CodePendingLinksFull)
	}
}

// Links that have not registered were bounded only by how fast a stranger
// mints keys: each key opens FUNDUQ_TICKETS_PER_MINUTE links a minute and
// holds each until the register deadline. Past FUNDUQ_MAX_PENDING_LINKS
// (3 here) links in the handshake or welcomed but unregistered, an upgrade
// is refused 503 with Retry-After and the error body before anything is
// spent — its ticket opens a link later. A registered link is not counted
// and goes on serving runs; once a pending link registers or closes, a new
// one is admitted.
func TestPendingLinksAreBounded(t *testing.T) {
	h := nodetest.Start(t, func(c *config.Broker) { c.MaxPendingLinks = 3 })
	honest := h.Connect(0xd0, nil)
	honest.Register("echo")

	admit(t, h, 0xd1)
	b := admit(t, h, 0xd2)
	// An upgraded link that has sent no hello yet is pending too.
	hs, resp, err := websocket.DefaultDialer.Dial(linkURL(h), nil)
	if err != nil {
		t.Fatalf("the third pending link (the honest one registered is not counted): %v", err)
	}
	resp.Body.Close()
	t.Cleanup(func() { _ = hs.Close() })

	k := doorKey(t, 0xd4)
	tk := ticketFor(t, h, k.PublicKeyHex())
	upgradeRefusedFull(t, h, "a fourth pending link")

	// The registered provider is served meanwhile.
	h.CompletedRun(honest, "echo", "while the bound is full")

	// The handshaking link goes on to welcome and register: it was held,
	// and registering frees its place.
	hk := doorKey(t, 0xd3)
	hsl := &stranger{t: t, ws: hs, pub: hk.PublicKeyHex()}
	if err := hs.WriteJSON(rawHello(h, hk.PublicKeyHex(), ticketFor(t, h, hk.PublicKeyHex()), nonceOf("hs"), hk)); err != nil {
		t.Fatal(err)
	}
	if typ, data := hsl.next(); typ != wire.TypeWelcome {
		t.Fatalf("the handshaking link's hello answered %q: %s", typ, data)
	}
	if typ, e := hsl.answered(named("hs", 1)); typ != wire.TypeRegistered {
		t.Fatalf("register: %q %q", typ, e.Message)
	}
	// Read "registered": its place is free, and the refused upgrade's
	// ticket was not spent.
	admitWith(t, h, k, tk, "after the refusal")
	upgradeRefusedFull(t, h, "full again")

	// A pending link that closes gives its place up.
	if err := b.ws.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "bye")); err != nil {
		t.Fatal(err)
	}
	_ = b.closed()
	h.Eventually("an upgrade admitted once a pending link closed", func() bool {
		ws, resp, err := websocket.DefaultDialer.Dial(linkURL(h), nil)
		if err != nil {
			if resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("upgrade: %v", err)
			}
			return false
		}
		resp.Body.Close()
		t.Cleanup(func() { _ = ws.Close() })
		return true
	})
	upgradeRefusedFull(t, h, "full with the new link")
	h.CompletedRun(honest, "echo", "at the end")
}

// Our SDK takes the refusal of a full pending bound as "later": it backs
// off and retries, and registers once a place frees, never giving up.
func TestSDKRetriesWhilePendingLinksAreFull(t *testing.T) {
	h := nodetest.Start(t, func(c *config.Broker) { c.MaxPendingLinks = 1 })
	s := admit(t, h, 0xd5)
	refused := make(chan struct{})
	log := slog.New(&watchHandler{match: apierr.CodePendingLinksFull, seen: refused})
	signer := doorKey(t, 0xd6)
	client, err := provider.New(provider.Config{
		BaseURL: h.URL, Signer: signer, FunduqKey: h.Node.FunduqKey(),
		Backoff: provider.Backoff{Min: 20 * time.Millisecond, Max: 200 * time.Millisecond},
		Logger:  log,
		Agents: []provider.Agent{{Name: "echo", Handler: func(ctx context.Context, r *provider.Run) error {
			return r.Emit(ctx, map[string]any{"type": "RUN_FINISHED", "threadId": r.ThreadID, "runId": r.ID})
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- client.Run(ctx) }()
	defer func() { cancel(); <-ran }()
	select {
	case <-refused:
	case err := <-ran:
		t.Fatalf("Run returned %v at the refusal", err)
	case <-client.Ready():
		t.Fatal("the SDK registered past FUNDUQ_MAX_PENDING_LINKS")
	case <-time.After(time.Minute): // a hang guard
		t.Fatal("no refusal logged")
	}
	// The stranger registers: its place frees, and the SDK gets in.
	if typ, e := s.answered(named("s", 1)); typ != wire.TypeRegistered {
		t.Fatalf("register: %q %q", typ, e.Message)
	}
	select {
	case <-client.Ready():
	case err := <-ran:
		t.Fatalf("Run returned %v before registering", err)
	case <-time.After(time.Minute): // a hang guard
		t.Fatal("the SDK did not register once a place freed")
	}
	if listed, online := servedOf(t, h, signer.PublicKeyHex()); listed != 1 || online != 1 {
		t.Fatalf("the SDK's agent: %d listed, %d online", listed, online)
	}
}

// watchHandler closes seen at the first record with an attribute
// mentioning match.
type watchHandler struct {
	match string
	seen  chan struct{}
	once  sync.Once
}

func (w *watchHandler) Enabled(context.Context, slog.Level) bool { return true }
func (w *watchHandler) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if strings.Contains(a.Value.String(), w.match) {
			w.once.Do(func() { close(w.seen) })
			return false
		}
		return true
	})
	return nil
}
func (w *watchHandler) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *watchHandler) WithGroup(string) slog.Handler      { return w }

// The bound is one over both link endpoints: a KYOK link that has not
// registered holds a place a provider link then cannot take.
func TestPendingLinksCountKyokLinks(t *testing.T) {
	h := nodetest.Start(t, func(c *config.Broker) { c.MaxPendingLinks = 1 })
	ws, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(h.URL, "http")+"/ws/kyok", nil)
	if err != nil {
		t.Fatalf("the KYOK link: %v", err)
	}
	resp.Body.Close()
	t.Cleanup(func() { _ = ws.Close() })
	upgradeRefusedFull(t, h, "a provider link while a KYOK link is pending")
}
