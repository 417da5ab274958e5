package kyokrelay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/funduq/funduq-go/broker-node/wsconn"
	"github.com/funduq/funduq-go/core/apierr"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/broker-node/handshake"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/kyok"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/strictjson"
	"github.com/funduq/funduq-go/core/wire"
)

// maxModelName is llm_offerings.name's limit.
const maxModelName = 256

// Defaults of Relay's register bounds (config.DefaultBrokerLimits'
// MaxAgentsPerRegister and MaxAgentCardBytes).
const (
	DefaultMaxModels        = 256
	DefaultMaxMetadataBytes = 64 << 10
)

// ServeHTTP upgrades GET /ws/kyok, handshakes and serves one LLM provider's
// link until it closes.
func (r *Relay) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if ok, _ := r.Leading(); !ok {
		if r.NotLeading != nil {
			r.NotLeading.ServeHTTP(w, req)
			return
		}
		w.Header().Set("Retry-After", "1")
		apierr.Write(w, http.StatusServiceUnavailable, apierr.New(apierr.CodeNotLeader, "this funduq node is not the leader"))
		return
	}
	r.upOnce.Do(func() {
		r.upgrader.CheckOrigin = func(*http.Request) bool { return true } // providers are not browsers
		r.upgrader.Error = wsconn.RefuseUpgrade
	})
	// Counted pending until it registers or ends, as a provider link is
	// (link.Server); past the bound refused before anything is spent.
	release, ok := r.Pending.Admit(w)
	if !ok {
		r.log().Debug("LLM provider link refused: FUNDUQ_MAX_PENDING_LINKS links have not registered", "remote", req.RemoteAddr)
		return
	}
	defer release()
	ws, err := r.upgrader.Upgrade(w, req, nil)
	if err != nil {
		return
	}
	r.httpWG.Add(1)
	defer r.httpWG.Done()
	ws.SetReadLimit(wsconn.Limit(r.MaxFrame))
	res, err := handshake.Accept(req.Context(), ws, handshake.Config{Funduq: r.Funduq, Tickets: r.Tickets, HelloTimeout: r.HelloTimeout})
	if err != nil {
		r.log().Info("LLM provider handshake refused", "remote", req.RemoteAddr, "err", err)
		return
	}
	c := newConn(ws, res.PublicKey, r.log().With("llm_provider_key", res.PublicKey))
	c.place = wsconn.NewPlace(r.Pending, release)
	writerDone := make(chan struct{})
	r.mu.Lock()
	if !r.leading {
		r.mu.Unlock()
		c.CloseWith(websocket.CloseTryAgainLater, "this funduq node is not the leader; reconnect")
		c.Writer(writerDone)
		return
	}
	r.links[c] = struct{}{}
	r.linksWG.Add(1)
	r.mu.Unlock()
	defer r.linksWG.Done()
	c.log.Info("LLM provider attached")
	// A link must register (design.md §The provider wire, "Admission").
	c.deadline = wsconn.StartRegisterDeadline(c.Conn, r.Clock, r.RegisterDeadline, nil, func() {
		c.log.Info("LLM provider link closed: no register in time", "deadline", r.RegisterDeadline)
	})
	go c.Writer(writerDone)
	r.readLoop(c)
	c.place.End()
	c.deadline.Stop()
	r.detach(c)
	c.CloseWith(websocket.CloseNormalClosure, "")
	<-writerDone
}

func (r *Relay) send(c *conn, v any) {
	if b, err := wire.Marshal(v); err == nil {
		_ = c.send(b)
	}
}

func (r *Relay) sendError(c *conn, requestID, name, msg string) {
	r.send(c, wire.KyokError{Type: wire.TypeError, RequestID: requestID, Name: name, Message: msg})
}

// readLoop handles frames in arrival order until the link closes. Nothing
// a provider sends closes it: bad frames are answered with an error frame.
func (r *Relay) readLoop(c *conn) {
	ctx := context.Background()
	err := wsconn.ReadLoop(c.WS, c.Closed(), func(data []byte) {
		frame, err := wire.DecodeKyokFrame(data)
		if err != nil {
			r.refuse(c, data, err.Error())
			return
		}
		switch f := frame.(type) {
		case wire.RegisterModels:
			r.register(ctx, c, f)
		case wire.DeleteModel:
			r.deleteModel(ctx, c, f)
		case wire.Answer:
			r.answer(ctx, c, f)
		}
	}, func(data []byte, reason string) { r.refuse(c, data, reason) })
	if err != nil {
		c.log.Info("LLM provider link ended", "err", err)
	}
}

// refuse answers a frame funduq does not read. One that still names a
// completion in flight on this link — a chunk whose data repeats a key,
// holds invalid UTF-8 or nests too deep, or whose members do not decode —
// is an invalid chunk and fails that completion (provider-link.md §8.1):
// dropped while the answer went on to done, it would hand the calling agent
// a truncated answer that looks like success (design.md §KYOK). Every
// top-level requestId counts, so a repeated one cannot hide a completion.
func (r *Relay) refuse(c *conn, data []byte, reason string) {
	var ids []string
	ms, _ := kyok.Members(data)
	for _, m := range ms {
		var id string
		if m.Key == "requestId" && json.Unmarshal(m.Value, &id) == nil && id != "" && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		r.sendError(c, "", "", reason)
		return
	}
	for _, id := range ids {
		r.sendError(c, id, "", reason)
		if comp := r.lookup(c, id); comp != nil {
			r.finish(comp, kyok.Reply{Kind: kyok.ReplyError, Message: "the LLM provider sent a frame funduq cannot read: " + reason}, store.FailedLLM)
		}
	}
}

// answer handles chunk, done and error frames of a completion.
func (r *Relay) answer(ctx context.Context, c *conn, f wire.Answer) {
	typ := f.Type
	comp := r.lookup(c, f.RequestID)
	if comp == nil {
		r.sendError(c, f.RequestID, "", "no such in-flight completion on this connection")
		return
	}
	switch typ {
	case wire.TypeChunk:
		if err := kyok.ValidateChunk(f.Data); err != nil {
			r.sendError(c, f.RequestID, "", err.Error())
			r.finish(comp, kyok.Reply{Kind: kyok.ReplyError, Message: "the LLM provider sent an invalid chunk: " + err.Error()}, store.FailedLLM)
			return
		}
		if !r.chunk(ctx, comp, f.Data) {
			r.sendError(c, f.RequestID, "", "no such in-flight completion on this connection")
		}
	case wire.TypeDone:
		r.finish(comp, kyok.Reply{Kind: kyok.ReplyDone}, store.Completions)
	case wire.TypeError:
		msg := "the LLM provider failed the completion"
		if f.Message != nil && *f.Message != "" {
			msg = *f.Message
		}
		if isObject(f.Refusal) { // a structured refusal, relayed intact
			r.finish(comp, kyok.Reply{Kind: kyok.ReplyError, Message: msg, Refusal: f.Refusal}, store.Refused)
			return
		}
		r.finish(comp, kyok.Reply{Kind: kyok.ReplyError, Message: msg}, store.FailedLLM)
	}
}

func isObject(raw json.RawMessage) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal(raw, &m) == nil && m != nil
}

// register replaces this link's roster of offerings.
func (r *Relay) register(ctx context.Context, c *conn, f wire.RegisterModels) {
	if len(f.Models) == 0 {
		r.sendError(c, "", "", "register does not validate: models must be a non-empty list of model names")
		return
	}
	// Bounded like an agent register (design.md §The provider wire,
	// "Admission"): a key costs a stranger nothing.
	maxModels, maxMeta := r.MaxModels, r.MaxMetadataBytes
	if maxModels <= 0 {
		maxModels = DefaultMaxModels
	}
	if maxMeta <= 0 {
		maxMeta = DefaultMaxMetadataBytes
	}
	if len(f.Models) > maxModels {
		r.sendError(c, "", "", fmt.Sprintf("register carries %d models, over the limit of %d (FUNDUQ_MAX_AGENTS_PER_REGISTER)", len(f.Models), maxModels))
		return
	}
	if len(f.Metadata) > maxMeta {
		r.sendError(c, "", "", fmt.Sprintf("register's metadata is %d bytes, over the limit of %d (FUNDUQ_MAX_AGENT_CARD_BYTES)", len(f.Metadata), maxMeta))
		return
	}
	seen := map[string]bool{}
	var names []string
	for _, n := range f.Models {
		// A NUL is valid UTF-8 but no text column holds it: refused as
		// invalid, not left to fail the write as passing trouble.
		if n == "" || len(n) > maxModelName || !utf8.ValidString(n) || strings.ContainsRune(n, 0) {
			r.sendError(c, "", "", fmt.Sprintf("register does not validate: model names are 1 to %d bytes of UTF-8 without NUL", maxModelName))
			return
		}
		if !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	sort.Strings(names)
	meta := bytes.TrimSpace(f.Metadata)
	if string(meta) == "null" {
		meta = nil
	}
	if len(meta) > 0 && !isObject(meta) {
		r.sendError(c, "", "", "register does not validate: metadata must be an object")
		return
	}
	if why := strictjson.Unstorable(meta); why != "" {
		// jsonb would refuse it on every try: say so, as the agent link
		// does (broker.Register), rather than "try again".
		r.sendError(c, "", "", "register does not validate: metadata "+why+", which funduq cannot store")
		return
	}
	r.roster.Lock()
	defer r.roster.Unlock()
	r.mu.Lock()
	epoch := r.epoch
	var dropped []string
	for n := range c.names {
		// A name another open link of the key registered stays served,
		// by that link (as when this one closes, detach).
		if !seen[n] && r.served[kyok.Ref{ProviderKey: c.key, Name: n}] == c && r.successorLocked(c.key, n, c) == nil {
			dropped = append(dropped, n)
		}
	}
	r.mu.Unlock()
	pub, _ := identity.ParsePublicKey(c.key)
	p := store.Provider{PublicKey: c.key, Fingerprint: identity.Fingerprint(pub)}
	if err := r.Store.ServeLLMOfferings(ctx, epoch, p, meta, names, dropped); err != nil {
		if errors.Is(err, store.ErrStaleEpoch) {
			r.lost(err)
			c.close("this funduq node stopped leading; reconnect")
			return
		}
		c.log.Warn("register not recorded", "err", err)
		r.sendError(c, "", "", "funduq could not record the offerings right now; try again")
		return
	}
	r.mu.Lock()
	var orphaned []string // kept served for a link that closed meanwhile
	for n := range c.names {
		if ref := (kyok.Ref{ProviderKey: c.key, Name: n}); !seen[n] && r.served[ref] == c {
			delete(r.served, ref)
			if next := r.successorLocked(c.key, n, c); next != nil {
				r.served[ref] = next
			} else if !slices.Contains(dropped, n) {
				orphaned = append(orphaned, n)
			}
		}
	}
	c.names = map[string]bool{}
	r.registers++
	c.registeredAt = r.registers
	for _, n := range names {
		c.names[n] = true
		r.served[kyok.Ref{ProviderKey: c.key, Name: n}] = c // takes over from an older link of this key
	}
	// Under r.mu, as a delete counts a link left serving nothing pending
	// again (conn.pendingAgain), and before the provider reads that it
	// registered: past the deadline, and no longer pending.
	c.deadline.Met()
	c.place.Leave()
	r.mu.Unlock()
	if len(orphaned) > 0 {
		// The other link meant to go on serving them closed while the
		// roster was written (its teardown left them to this link).
		if err := r.Store.UnserveLLMOfferings(ctx, epoch, c.key, orphaned); err != nil && !errors.Is(err, store.ErrStaleEpoch) {
			c.log.Warn("offerings not marked unserved", "err", err)
		}
	}
	c.log.Info("LLM offerings registered", "models", names)
	r.send(c, wire.Registered{Type: wire.TypeRegistered, Names: names})
}

// deleteModel removes one of the key's offerings, refused while a
// completion for it is in flight or a live run is bound to it.
func (r *Relay) deleteModel(ctx context.Context, c *conn, f wire.DeleteModel) {
	if strings.ContainsRune(f.Name, 0) {
		// No offering's name holds a NUL (register refuses one), and the
		// lookup would fail as storage trouble.
		r.sendError(c, "", f.Name, "no such model")
		return
	}
	ref := kyok.Ref{ProviderKey: c.key, Name: f.Name}
	r.mu.Lock()
	busy, epoch, by := r.busy[ref], r.epoch, r.served[ref]
	r.mu.Unlock()
	if by != nil && by != c {
		// Deleting happens on the serving link, as deleteAgent's does
		// (broker.DeleteAgent): another link of this key took the model
		// over (a provider's new process) and goes on serving it; deleting
		// its record would leave that link serving an offering the roster
		// says is gone, every call to it refused.
		r.sendError(c, "", f.Name, "this model is served by another link of this key; send deleteModel on that link")
		return
	}
	if busy > 0 {
		r.sendError(c, "", f.Name, "a completion for this model is in flight; delete it when it has ended")
		return
	}
	err := r.Store.DeleteLLMOffering(ctx, epoch, c.key, f.Name)
	switch {
	case err == nil:
	case errors.Is(err, store.ErrOfferingInUse):
		r.sendError(c, "", f.Name, "a live run is bound to this model; delete it when the run has ended")
		return
	case errors.Is(err, store.ErrNotFound):
		r.sendError(c, "", f.Name, "no such model")
		return
	case errors.Is(err, store.ErrStaleEpoch):
		r.lost(err)
		c.close("this funduq node stopped leading; reconnect")
		return
	default:
		c.log.Warn("deleteModel not recorded", "err", err)
		r.sendError(c, "", f.Name, "funduq could not complete this request right now; try again")
		return
	}
	r.mu.Lock()
	if r.served[ref] == c {
		delete(r.served, ref)
	}
	// The key's offering is gone: no older link of the key takes it up
	// again when this one closes.
	for l := range r.links {
		if l.key == c.key {
			delete(l.names, f.Name)
			l.pendingAgain() // if that left it serving nothing
		}
	}
	delete(c.names, f.Name)
	r.mu.Unlock()
	r.send(c, wire.Deleted{Type: wire.TypeDeleted, Name: f.Name})
}

// detach forgets a closed link: only offerings whose serving link is this
// one go unserved (a replaced link never takes down its replacement), and
// its in-flight completions fail now.
func (r *Relay) detach(c *conn) {
	r.mu.Lock()
	delete(r.links, c)
	var mine []string
	for n := range c.names {
		if ref := (kyok.Ref{ProviderKey: c.key, Name: n}); r.served[ref] == c {
			delete(r.served, ref)
			// An older link of the key that registered the name and is
			// still open serves it again: an offering is online while a
			// live link registered it (provider-link.md §1), and that
			// link was never told it had stopped serving it.
			if next := r.successorLocked(c.key, n, c); next != nil {
				r.served[ref] = next
				continue
			}
			mine = append(mine, n)
		}
	}
	comps := make([]*completion, 0, len(c.inflight))
	for _, comp := range c.inflight {
		comps = append(comps, comp)
	}
	epoch, leading := r.epoch, r.leading
	r.mu.Unlock()
	for _, comp := range comps {
		if !leading {
			// This node stopped leading and closed the link itself (Run):
			// the LLM provider did nothing wrong, and nothing is counted
			// (design.md §KYOK).
			r.finish(comp, kyok.Reply{Kind: kyok.ReplyRelayLost, Message: "the funduq broker node relaying this completion stopped leading"}, "")
			continue
		}
		r.finish(comp, kyok.Reply{Kind: kyok.ReplyError, Message: "the LLM provider's link closed mid-completion"}, store.FailedLLM)
	}
	// A link of the same key may have registered the offering again while
	// the completions were failing (a provider restarting): its durable
	// write is not undone (design.md §KYOK).
	r.roster.Lock()
	defer r.roster.Unlock()
	r.mu.Lock()
	mine = slices.DeleteFunc(mine, func(n string) bool { return r.served[kyok.Ref{ProviderKey: c.key, Name: n}] != nil })
	r.mu.Unlock()
	if len(mine) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Store.UnserveLLMOfferings(ctx, epoch, c.key, mine); err != nil && !errors.Is(err, store.ErrStaleEpoch) {
		c.log.Warn("offerings not marked unserved", "err", err)
	}
	c.log.Info("LLM provider detached", "models", mine)
}

// successorLocked is the open link of key, other than except, that
// registered name most recently, nil when none did. Callers hold r.mu.
func (r *Relay) successorLocked(key, name string, except *conn) *conn {
	var best *conn
	for l := range r.links {
		if l != except && l.key == key && l.names[name] && (best == nil || l.registeredAt > best.registeredAt) {
			best = l
		}
	}
	return best
}
