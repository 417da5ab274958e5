// Package kyokrelay is the leader's half of KYOK (issue 7): GET /ws/kyok,
// the LLM providers' link (same tickets and hello/welcome handshake as
// /ws/provider), their offerings roster, and the consumer of the doors'
// completion requests on Redis.
//
// A completion request arrives on {prefix}kyok:requests (written by any KYOK
// door, see core/kyok); the relay resolves the bound offering to whichever
// link serves it now, writes completionRequest to that link and answers on
// the request's reply stream: "unavailable" at once when no link serves the
// offering, else "accepted", the provider's chunks in order, then done or
// error. A completion ends on done, error, link loss or a gap of GapTimeout
// (120 s) between frames; answers count only on the link the request went
// to. Each ending is counted against the LLM provider's key (completions,
// refused, failed) under the leader's epoch.
//
// The relay leads with the broker: Run (or Start) under the leadership
// context and epoch. While it does not lead, ServeHTTP answers 503 through
// NotLeading.
package kyokrelay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/jonboulle/clockwork"
	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/broker-node/handshake"
	"github.com/funduq/funduq-go/broker-node/lease"
	"github.com/funduq/funduq-go/broker-node/wsconn"
	"github.com/funduq/funduq-go/core/backoff"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/kyok"
	"github.com/funduq/funduq-go/core/redisbound"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/wire"
)

// DefaultGapTimeout is the provider-is-gone detector: the longest silence
// between two frames of one completion's answer.
const DefaultGapTimeout = 120 * time.Second

// DefaultReplyTTL is how long a reply stream outlives its last entry.
const DefaultReplyTTL = 5 * time.Minute

// Relay serves /ws/kyok and relays completions while it leads.
type Relay struct {
	Store   *store.Store
	Redis   *redis.Client
	Prefix  string // the node's Redis key prefix (config Storage.RedisPrefix)
	Funduq  *identity.Signer
	Tickets handshake.TicketClaimer
	Log     *slog.Logger
	// NotLeading answers an upgrade while the relay does not lead (503
	// naming the leader). Nil answers a plain 503.
	NotLeading http.Handler
	// HelloTimeout overrides the handshake's 5 s wait for the hello.
	HelloTimeout time.Duration
	// GapTimeout overrides DefaultGapTimeout (tests).
	GapTimeout time.Duration
	// ReplyTTL overrides DefaultReplyTTL.
	ReplyTTL time.Duration
	// Block is how long one XREAD waits (DefaultBlock); with
	// redisbound.Slack it bounds how long Run takes to notice its context
	// ended (go-redis does not cut a blocking read short when its context
	// is cancelled), a hung Redis or not.
	Block time.Duration
	// MaxConcurrent caps the completions in flight on one LLM link
	// (config BrokerLimits.KyokMaxConcurrent; 0: the default); one more is
	// answered kyok.ReplyBusy at once and never reaches the link.
	MaxConcurrent int
	// MaxFrame caps one inbound frame (config BrokerLimits.MaxFrame; 0:
	// wsconn.MaxFrame).
	MaxFrame int64
	// RegisterDeadline is how long a link may stay open after welcome
	// without a register answered "registered" (config
	// FUNDUQ_REGISTER_DEADLINE); 0: no deadline.
	RegisterDeadline time.Duration
	// Clock times the register deadline (nil: the real clock).
	Clock clockwork.Clock
	// MaxModels caps the models one register carries (config
	// FUNDUQ_MAX_AGENTS_PER_REGISTER; 0: DefaultMaxModels).
	MaxModels int
	// MaxMetadataBytes caps a register's metadata (config
	// FUNDUQ_MAX_AGENT_CARD_BYTES; 0: DefaultMaxMetadataBytes).
	MaxMetadataBytes int
	// Pending bounds the links that have not registered, shared with the
	// provider links (config FUNDUQ_MAX_PENDING_LINKS); nil: no bound.
	Pending *wsconn.Pending

	// roster orders the durable roster's writes (register, a link's
	// teardown) with the in-memory served map they follow: a teardown
	// marks unserved only what no newer link serves when it writes.
	roster  sync.Mutex
	mu      sync.Mutex
	leading bool
	epoch   int64
	stop    context.CancelCauseFunc
	links   map[*conn]struct{}
	served  map[kyok.Ref]*conn
	busy    map[kyok.Ref]int // completions in flight per offering
	// registers counts registers (conn.registeredAt).
	registers uint64
	linksWG   sync.WaitGroup // attached links
	httpWG    sync.WaitGroup // every ServeHTTP
	keepWG    sync.WaitGroup // every completion's keep-alive
	upgrader  websocket.Upgrader
	upOnce    sync.Once
}

func (r *Relay) log() *slog.Logger {
	if r.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return r.Log
}

func (r *Relay) gap() time.Duration {
	if r.GapTimeout > 0 {
		return r.GapTimeout
	}
	return DefaultGapTimeout
}

func (r *Relay) replyTTL() time.Duration {
	if r.ReplyTTL > 0 {
		return r.ReplyTTL
	}
	return DefaultReplyTTL
}

// DefaultBlock is Block's default. A leader hands its lease over only
// once the relay has stopped, so this wait is part of every SIGTERM
// handover (at 1 s it was most of it); an idle leader pays four XREADs a
// second for it.
const DefaultBlock = 250 * time.Millisecond

func (r *Relay) block() time.Duration {
	if r.Block > 0 {
		return r.Block
	}
	return DefaultBlock
}

// DefaultMaxConcurrent is MaxConcurrent's default (config's).
const DefaultMaxConcurrent = 16

func (r *Relay) maxConcurrent() int {
	if r.MaxConcurrent > 0 {
		return r.MaxConcurrent
	}
	return DefaultMaxConcurrent
}

// Leading reports whether the relay leads, and under which epoch.
func (r *Relay) Leading() (bool, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.leading, r.epoch
}

// Start runs Run in the background and returns a function that ends it and
// waits for it (the node's hook: `defer relay.Start(ctx, epoch)()`).
func (r *Relay) Start(ctx context.Context, epoch int64) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		// A requested handover is routine (Run logged it at INFO).
		if err := r.Run(ctx, epoch); err != nil && !errors.Is(err, lease.ErrHandover) {
			r.log().Error("kyok relay stopped", "err", err, "epoch", epoch)
		}
	}()
	return func() { cancel(); <-done }
}

// Run leads under epoch until ctx ends or a write finds the epoch stale:
// it accepts /ws/kyok links and consumes the doors' completion requests.
// When it returns every link it accepted has been closed and has finished
// (their in-flight completions failed).
func (r *Relay) Run(ctx context.Context, epoch int64) error {
	if r.Store == nil || r.Redis == nil || r.Funduq == nil || r.Tickets == nil {
		return errors.New("kyokrelay: Relay needs Store, Redis, Funduq and Tickets")
	}
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	r.mu.Lock()
	if r.leading {
		r.mu.Unlock()
		return errors.New("kyokrelay: already leading")
	}
	r.leading, r.epoch, r.stop = true, epoch, stop
	r.links, r.served, r.busy = map[*conn]struct{}{}, map[kyok.Ref]*conn{}, map[kyok.Ref]int{}
	r.mu.Unlock()
	log := r.log().With("epoch", epoch)
	log.InfoContext(ctx, "kyok relay leading")

	r.consume(ctx, log)

	cause := context.Cause(ctx)
	r.mu.Lock()
	r.leading = false
	links := make([]*conn, 0, len(r.links))
	for c := range r.links {
		links = append(links, c)
	}
	r.mu.Unlock()
	reason := "funduq broker node stopped leading; reconnect"
	if errors.Is(cause, store.ErrStaleEpoch) {
		reason = "funduq broker node was deposed; reconnect"
	}
	for _, c := range links {
		c.close(reason)
	}
	r.linksWG.Wait()
	r.keepWG.Wait()
	log.InfoContext(context.Background(), "kyok relay stopped leading", "cause", fmt.Sprint(cause))
	if cause == nil || errors.Is(cause, context.Canceled) {
		return nil
	}
	return cause
}

// Wait blocks until every ServeHTTP this relay started has returned.
func (r *Relay) Wait() { r.httpWG.Wait() }

// lost ends leadership because a write found the epoch stale.
func (r *Relay) lost(err error) {
	r.mu.Lock()
	stop := r.stop
	r.mu.Unlock()
	if stop != nil {
		stop(err)
	}
}

// consume reads the request stream from its current end until ctx ends.
func (r *Relay) consume(ctx context.Context, log *slog.Logger) {
	stream := kyok.RequestStream(r.Prefix)
	last := ""
	failures := 0
	for ctx.Err() == nil {
		if last == "" {
			// Start after the newest entry: older requests' doors have given up.
			cctx, cancel := redisbound.Call(ctx)
			msgs, err := r.Redis.XRevRangeN(cctx, stream, "+", "-", 1).Result()
			cancel()
			if err != nil {
				log.WarnContext(ctx, "kyok request stream unreadable; retrying", "err", err)
				sleep(ctx, &failures)
				continue
			}
			last = "0-0"
			if len(msgs) == 1 {
				last = msgs[0].ID
			}
		}
		// Each wait on Redis is bounded by funduq's clock, not the
		// client's (block + 10 s; for ever with read_timeout=0 while it
		// sets a connection up): a leader hands over only once this loop
		// has noticed ctx ended (design.md §Failure).
		rctx, cancel := redisbound.Blocking(ctx, r.block())
		res, err := r.Redis.XRead(rctx, &redis.XReadArgs{Streams: []string{stream, last}, Block: r.block(), Count: 64}).Result()
		cancel()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			log.WarnContext(ctx, "kyok request stream read failed; retrying", "err", err)
			sleep(ctx, &failures)
			continue
		}
		failures = 0
		var taken []string
		for _, s := range res {
			for _, m := range s.Messages {
				last = m.ID
				taken = append(taken, m.ID)
				raw, _ := m.Values[kyok.FieldRequest].(string)
				var req kyok.Request
				if err := json.Unmarshal([]byte(raw), &req); err != nil || req.RequestID == "" || req.ReplyKey == "" {
					if req.ReplyKey != "" {
						// The door can still be told, on the key it waits on.
						r.reply(ctx, req.ReplyKey, kyok.Reply{Kind: kyok.ReplyError, Message: "funduq could not read the completion request"})
						continue
					}
					// Nowhere to answer: the door waiting for it times out
					// and answers its caller itself.
					log.ErrorContext(ctx, "kyok request without a reply key, unanswerable", "id", m.ID)
					continue
				}
				r.dispatch(ctx, req)
			}
		}
		// A request is taken up once; its entry (the agent's prompt, the
		// caller's context in the clear) is not kept for a door that died
		// before deleting it (design.md §KYOK).
		dctx, cancel := redisbound.Call(ctx)
		err = r.Redis.XDel(dctx, stream, taken...).Err()
		cancel()
		if err != nil && ctx.Err() == nil {
			log.WarnContext(ctx, "kyok requests taken up not deleted", "err", err)
		}
	}
}

// readBackoff paces re-reads of the request stream after a failure: 50 ms
// doubling to 1.6 s, without jitter; a read that succeeds starts it over.
var readBackoff = backoff.Policy{Min: 50 * time.Millisecond, Max: 1600 * time.Millisecond}

// sleep waits out the backoff after one more failure, counted in *failures.
func sleep(ctx context.Context, failures *int) {
	*failures++
	t := time.NewTimer(readBackoff.Delay(*failures))
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// completion is one request delivered on a link, until it ends.
type completion struct {
	id       string
	ref      kyok.Ref
	replyKey string
	c        *conn

	mu    sync.Mutex // orders this completion's reply writes
	ended bool
	timer *time.Timer
}

// dispatch hands one request to the link serving its offering now, or
// answers "unavailable" at once.
func (r *Relay) dispatch(ctx context.Context, req kyok.Request) {
	if time.Now().UnixMilli() > req.Deadline {
		r.log().InfoContext(ctx, "stale kyok request dropped", "request_id", req.RequestID)
		return
	}
	r.mu.Lock()
	c := r.served[req.LLM]
	if c == nil {
		r.mu.Unlock()
		r.reply(ctx, req.ReplyKey, kyok.Reply{Kind: kyok.ReplyUnavailable, Message: "the LLM offering is not attached"})
		return
	}
	if limit := r.maxConcurrent(); len(c.inflight) >= limit {
		r.mu.Unlock()
		r.log().WarnContext(ctx, "kyok completion refused: the LLM link is at its limit", "request_id", req.RequestID,
			"llm_provider_key", c.key, "in_flight", limit)
		r.reply(ctx, req.ReplyKey, kyok.Reply{Kind: kyok.ReplyBusy,
			Message: fmt.Sprintf("the LLM provider's link has %d completions in flight, its limit", limit)})
		return
	}
	comp := &completion{id: req.RequestID, ref: req.LLM, replyKey: req.ReplyKey, c: c}
	comp.mu.Lock()
	defer comp.mu.Unlock()
	c.inflight[req.RequestID] = comp
	r.busy[req.LLM]++
	r.mu.Unlock()

	ctxJSON, chain := req.Context, req.ActorChain
	if len(ctxJSON) == 0 {
		ctxJSON = json.RawMessage("null")
	}
	if len(chain) == 0 {
		chain = json.RawMessage("null")
	}
	frame, err := wire.Marshal(wire.KyokCompletionRequest{Type: wire.TypeCompletionRequest, RequestID: req.RequestID,
		RunID: req.RunID, ProviderKey: req.ProviderKey, AgentName: req.AgentName, Body: req.Body,
		LLMName: req.LLM.Name, Context: ctxJSON, ActorChain: chain})
	if err == nil {
		err = c.send(frame)
	}
	if err != nil {
		// Not delivered: nothing the provider did, so nothing is counted.
		r.endLocked(comp, kyok.Reply{Kind: kyok.ReplyUnavailable, Message: "the LLM provider's link closed"}, "")
		return
	}
	r.reply(ctx, req.ReplyKey, kyok.Reply{Kind: kyok.ReplyAccepted})
	r.keepAlive(ctx, comp)
	comp.timer = time.AfterFunc(r.gap(), func() {
		r.finish(comp, kyok.Reply{Kind: kyok.ReplyError,
			Message: fmt.Sprintf("the LLM provider sent nothing for %s", r.gap())}, store.FailedLLM)
	})
	c.log.DebugContext(ctx, "completion delivered", "request_id", req.RequestID, "run_id", req.RunID, "llm", req.LLM.Name)
}

// keepAlive says, every kyok.KeepAliveEvery until the completion ends or
// this node stops leading, that the relay still holds it — so a door can
// tell a quiet LLM provider from a dead leader.
func (r *Relay) keepAlive(ctx context.Context, comp *completion) {
	r.keepWG.Add(1)
	go func() {
		defer r.keepWG.Done()
		t := time.NewTicker(kyok.KeepAliveEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			comp.mu.Lock()
			ended := comp.ended
			comp.mu.Unlock()
			if ended {
				return
			}
			r.reply(ctx, comp.replyKey, kyok.Reply{Kind: kyok.ReplyKeepAlive})
		}
	}()
}

// reply appends one entry to a reply stream and renews its TTL.
func (r *Relay) reply(ctx context.Context, key string, rep kyok.Reply) {
	b, err := json.Marshal(rep)
	if err != nil {
		return
	}
	if ctx.Err() != nil {
		// The last reply of a completion still goes out as leadership
		// ends.
		ctx = context.WithoutCancel(ctx)
	}
	// Bounded by funduq's clock: a reply stuck on a hung Redis would hold
	// a completion, its keep-alive and so Run's return (design.md
	// §Failure).
	ctx, cancel := redisbound.Call(ctx)
	defer cancel()
	_, err = r.Redis.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.XAdd(ctx, &redis.XAddArgs{Stream: key, Values: []any{kyok.FieldReply, string(b)}})
		p.Expire(ctx, key, r.replyTTL())
		return nil
	})
	if err != nil {
		r.log().WarnContext(ctx, "kyok reply not written", "key", key, "kind", rep.Kind, "err", err)
	}
}

// lookup finds the in-flight completion id on c (nil: none).
func (r *Relay) lookup(c *conn, id string) *completion {
	r.mu.Lock()
	defer r.mu.Unlock()
	return c.inflight[id]
}

// chunk relays one chunk of comp's answer.
func (r *Relay) chunk(ctx context.Context, comp *completion, data json.RawMessage) bool {
	comp.mu.Lock()
	defer comp.mu.Unlock()
	if comp.ended {
		return false
	}
	comp.timer.Reset(r.gap())
	r.reply(ctx, comp.replyKey, kyok.Reply{Kind: kyok.ReplyChunk, Data: data})
	return true
}

// finish ends comp with its last reply and counts it (counter "" counts
// nothing). It reports whether this call ended it.
func (r *Relay) finish(comp *completion, rep kyok.Reply, counter store.Counter) bool {
	comp.mu.Lock()
	defer comp.mu.Unlock()
	return r.endLocked(comp, rep, counter)
}

func (r *Relay) endLocked(comp *completion, rep kyok.Reply, counter store.Counter) bool {
	if comp.ended {
		return false
	}
	comp.ended = true
	if comp.timer != nil {
		comp.timer.Stop()
	}
	r.mu.Lock()
	if _, ok := comp.c.inflight[comp.id]; ok {
		delete(comp.c.inflight, comp.id)
		if r.busy[comp.ref]--; r.busy[comp.ref] <= 0 {
			delete(r.busy, comp.ref)
		}
	}
	epoch := r.epoch
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r.reply(ctx, comp.replyKey, rep)
	if counter != "" && r.Redis.Exists(ctx, kyok.GoneKey(r.Prefix, comp.id)).Val() > 0 {
		// Its caller went away part-way: an answer nobody read is none of
		// completions, refused or failed (design.md §Counters).
		comp.c.log.InfoContext(ctx, "kyok completion not counted: its caller left", "request_id", comp.id)
		counter = ""
	}
	if counter != "" {
		if _, err := r.Store.Bump(ctx, epoch, comp.c.key, counter); err != nil {
			r.log().WarnContext(ctx, "kyok counter not recorded", "provider_key", comp.c.key, "counter", string(counter), "err", err)
			if errors.Is(err, store.ErrStaleEpoch) {
				r.lost(err)
			}
		}
	}
	return true
}
