package link

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

	"github.com/funduq/funduq-go/broker-node/broker"
	"github.com/funduq/funduq-go/broker-node/handshake"
	"github.com/funduq/funduq-go/broker-node/wsconn"
	"github.com/funduq/funduq-go/core/apierr"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/wire"
)

// Server serves GET /ws/provider for a broker.
type Server struct {
	Broker  *broker.Broker
	Funduq  *identity.Signer
	Tickets handshake.TicketClaimer
	Log     *slog.Logger
	// NotLeading answers an upgrade while this node does not lead (503
	// naming the leader, D11). Nil answers a plain 503.
	NotLeading http.Handler
	// HelloTimeout overrides the handshake's 5 s wait for the hello.
	HelloTimeout time.Duration
	// MaxFrame caps one inbound frame (config BrokerLimits.MaxFrame; 0:
	// wsconn.MaxFrame).
	MaxFrame int64
	// PingInterval overrides how often a link is pinged (0:
	// wsconn.PingEvery). The pings go on while the link is not read.
	PingInterval time.Duration
	// WriteTimeout overrides the bound on one frame's write to a link
	// (0: wsconn's 10 s; tests).
	WriteTimeout time.Duration
	// RegisterDeadline is how long a link may stay open after welcome
	// without a register answered "registered" (config
	// FUNDUQ_REGISTER_DEADLINE); 0: no deadline.
	RegisterDeadline time.Duration
	// Clock times the register deadline (nil: the real clock).
	Clock clockwork.Clock
	// QueryTimeout overrides a query's time limit (0: queryTimeout).
	QueryTimeout time.Duration
	// Pending bounds the links that have not registered, shared with
	// the KYOK relay (config FUNDUQ_MAX_PENDING_LINKS); nil: no bound.
	Pending *wsconn.Pending

	wg       sync.WaitGroup
	once     sync.Once
	upgrader websocket.Upgrader
}

// queryTimeout is a query's time limit, from when the reports before it are
// taken: its wait for the broker's query budget and its reads together. A
// query holds a pooled connection no longer (pgx cancels its statement at
// the deadline) and is answered within it, with what it read or an error.
const queryTimeout = 10 * time.Second

// writeBuffers are the links' WebSocket write buffers, shared.
var writeBuffers sync.Pool

// ServeHTTP upgrades, handshakes and serves one link until it closes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if ok, _ := s.Broker.Leading(); !ok {
		if s.NotLeading != nil {
			s.NotLeading.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Retry-After", "1")
		apierr.Write(w, http.StatusServiceUnavailable, apierr.New(apierr.CodeNotLeader, "this funduq node is not the leader"))
		return
	}
	s.once.Do(func() {
		s.upgrader.CheckOrigin = func(*http.Request) bool { return true } // providers are not browsers
		s.upgrader.Error = wsconn.RefuseUpgrade
		// Write buffers only while writing: an idle link holds none.
		s.upgrader.WriteBufferPool = &writeBuffers
	})
	// A link is counted pending from before its upgrade until it
	// registers or ends; past the bound it is refused here, before the
	// upgrade and the handshake cost anything (its ticket included).
	release, ok := s.Pending.Admit(w)
	if !ok {
		s.Log.Debug("provider link refused: FUNDUQ_MAX_PENDING_LINKS links have not registered", "remote", r.RemoteAddr)
		return
	}
	ws, err := s.upgrader.Upgrade(w, r, nil)
	if err != nil {
		release()
		return // the upgrader answered the client
	}
	s.wg.Add(1)
	ws.SetReadLimit(wsconn.Limit(s.MaxFrame))
	res, err := handshake.Accept(r.Context(), ws, handshake.Config{Funduq: s.Funduq, Tickets: s.Tickets, HelloTimeout: s.HelloTimeout})
	if err != nil {
		s.Log.Info("provider handshake refused", "remote", r.RemoteAddr, "err", err)
		_ = ws.Close()
		release()
		s.wg.Done()
		return
	}
	// The link lives on its own goroutine so this request (its response
	// buffers, headers, and the HTTP server's goroutine) is let go: an idle
	// link holds only what it needs.
	go func() {
		defer s.wg.Done()
		s.serve(ws, res, release)
	}()
}

// serve runs one handshaken link until it closes. release gives its
// pending place back (at its first register, or its end); the link may be
// counted again later (Conn.pendingAgain).
func (s *Server) serve(ws *websocket.Conn, res handshake.Result, release func()) {
	defer release()
	log := s.Log.With("provider_key", res.PublicKey)
	c := newConn(ws, res.PublicKey, log)
	c.place = wsconn.NewPlace(s.Pending, release)
	c.Ping = s.PingInterval
	c.WriteTimeout = s.WriteTimeout
	c.MaxQueued = wsconn.QueueBytes(s.MaxFrame)
	if err := s.Broker.Attach(c, res.MaxConcurrentRuns); err != nil {
		c.CloseWith(websocket.CloseTryAgainLater, "this funduq node is not the leader; reconnect")
		done := make(chan struct{})
		c.Writer(done)
		return
	}
	writerDone := make(chan struct{})
	go c.Writer(writerDone)
	// A link must register (design.md §The provider wire, "Admission"),
	// unless it is finishing runs of its key without registering, as a
	// replaced process does (D5): the deadline waits while it holds one.
	holds := func() bool { return s.Broker.HoldsRuns(c) }
	c.deadline = wsconn.StartRegisterDeadline(c.Conn, s.Clock, s.RegisterDeadline, holds, func() {
		c.log.Info("provider link closed: no register in time", "deadline", s.RegisterDeadline)
	})
	ctx, cancel := context.WithCancel(context.Background())
	var queries sync.WaitGroup
	lost := s.readLoop(ctx, c, &queries)
	c.place.End() // ended: whatever follows is its goodbye
	c.ReadDone()
	c.deadline.Stop()
	// A link closed for not registering was not left on purpose: whatever
	// it holds waits the link grace for a link that registers (D5), as a
	// lost link's does, rather than being counted abandoned.
	lost = lost || c.deadline.Lapsed()
	s.Broker.Detach(c, lost)
	c.CloseWith(websocket.CloseNormalClosure, "")
	cancel()
	queries.Wait()
	<-writerDone
}

// Wait blocks until every link this server opened has finished.
func (s *Server) Wait() { s.wg.Wait() }

func (s *Server) send(c *Conn, v any) {
	b, err := wire.Marshal(v)
	if err == nil {
		_ = c.Send(b)
	}
}

func (s *Server) sendError(c *Conn, msg, runID, name string) {
	s.send(c, wire.Error{Type: wire.TypeError, Message: msg, RunID: runID, Name: name})
}

// refuseFrame answers a frame funduq cannot read with reason, naming runID
// when the frame is a report tied to its run. A register so refused is
// refused for good: the same bytes are refused again however often they
// are sent (design.md §The provider wire, "Refusal codes").
func (s *Server) refuseFrame(c *Conn, data []byte, reason, runID string) {
	if typ, _ := wire.PeekType(data); typ == wire.TypeRegister {
		s.send(c, wire.RegisterRefusal(wire.CodeRegisterRefused, reason))
		return
	}
	s.sendError(c, reason, runID, "")
}

// readLoop processes frames in arrival order until the link closes. It
// reports whether the link was lost: it ended without the provider's close
// frame (a transport failure, a silent peer), not by the provider's goodbye
// nor by funduq closing it.
func (s *Server) readLoop(ctx context.Context, c *Conn, queries *sync.WaitGroup) (lost bool) {
	querySlots := make(chan struct{}, 8)
	limit := wsconn.Limit(s.MaxFrame)
	err := wsconn.ReadLoopLimited(c.WS, c.ReadStop(), limit, func(data []byte) {
		frame, err := wire.DecodeProviderFrame(data)
		if err != nil {
			var fe *wire.FrameError
			runID := ""
			if errors.As(err, &fe) {
				runID = fe.RunID
			}
			s.refuseFrame(c, data, err.Error(), runID)
			return
		}
		s.handle(ctx, c, frame, querySlots, queries)
	}, func(data []byte, reason string) {
		// A report tied to its run is refused naming it; an event whose
		// own bytes failed the check is a malformed event (D15, D18). A
		// frame that is not text is the frame's defect, never its
		// event's: failing the run would blame the agent's output.
		runID, inEvent := wire.RefusedReport(data)
		if inEvent && reason != wsconn.RefusedNotText {
			s.Broker.MalformedEvent(c, runID, errors.New(reason))
			return
		}
		s.refuseFrame(c, data, reason, runID)
	}, func(o wsconn.Oversized) {
		// A frame over the limit is answered like any refused frame, and
		// an event in it is an oversized event of its run: the run fails
		// with that reason and nothing that withdraws is counted, where
		// closing the link would have held the run and counted it
		// abandoned (design.md D18).
		reason := fmt.Sprintf("frame refused: %d bytes, over the frame limit of %d bytes (FUNDUQ_MAX_FRAME_BYTES)", o.Size, limit)
		switch o.Type {
		case wire.TypeEvent:
			if o.RunID != "" {
				s.Broker.OversizedEvent(c, o.RunID, errors.New(reason))
				return
			}
		case wire.TypeAck, wire.TypeFinish:
		case wire.TypeRegister:
			// The same register is over the limit however often it is
			// sent (design.md §The provider wire, "Refusal codes").
			s.send(c, wire.RegisterRefusal(wire.CodeRegisterRefused, reason))
			return
		default:
			o.RunID = "" // only a report is answered naming its run
		}
		s.sendError(c, reason, o.RunID, "")
	})
	if err == nil || c.Draining() {
		// funduq closed the link (and read it up to the provider's
		// answer to a draining close). One it cut off because the provider
		// stopped reading (or its socket failed) had no goodbye: a lost
		// link, whose runs wait the link grace (design.md D5).
		if c.CutOff() {
			c.log.Info("provider link cut off", "reason", c.Reason())
		}
		return c.CutOff()
	}
	// Only the provider's own close frame is a goodbye (gorilla reports a
	// connection cut without one as 1006); a link funduq closed answers
	// funduq's close frame with its own.
	var ce *websocket.CloseError
	lost = !errors.As(err, &ce) || ce.Code == websocket.CloseAbnormalClosure
	// A link funduq closed (it stopped leading, say: its providers are
	// told to reconnect) holds its runs for the link grace as a lost one
	// does, but its provider dropped nothing: the log says lost only of
	// the provider's side, so a routine stop does not read as every
	// provider falling over.
	dropped := lost
	select {
	case <-c.Closed():
		lost, dropped = true, c.CutOff()
	default:
	}
	c.log.Info("provider link ended", "err", err, "lost", dropped, "reason", c.Reason())
	return lost
}

// handle acts on one decoded frame. A query is answered off the read loop,
// at most len(querySlots) at a time.
func (s *Server) handle(ctx context.Context, c *Conn, frame any, querySlots chan struct{}, queries *sync.WaitGroup) {
	if c.Draining() {
		// After funduq's close frame (a replaced link closed, broker
		// replaced.go) only reports are taken: they carry the provider's
		// runs on. A register would take agents on a link being closed,
		// and nothing can be answered now.
		switch frame.(type) {
		case wire.Ack, wire.Event, wire.Finish:
		default:
			return
		}
	}
	switch f := frame.(type) {
	case wire.Register:
		s.register(ctx, c, f)
	case wire.DeleteAgent:
		err := s.Broker.DeleteAgent(ctx, c, f.Name)
		// The name is no longer served whatever the answer (a refused
		// record stays); a link left serving nothing is pending again.
		s.Broker.WhenBare(c, c.pendingAgain)
		if err != nil {
			msg, _ := refusal(err)
			s.sendError(c, msg, "", f.Name)
			return
		}
		s.send(c, wire.Deleted{Type: wire.TypeDeleted, Name: f.Name})
	case wire.Ack:
		v, reason := f.Verdict()
		s.Broker.Ack(c, f.RunID, v, reason)
	case wire.Event:
		// What the broker does not take it answers itself (D15).
		s.Broker.Event(c, f.RunID, f.Event, f.ProviderSeq)
	case wire.Finish:
		s.Broker.Finish(c, f.RunID)
	case wire.Query:
		if !s.querySlot(c, querySlots, f) {
			return
		}
		// Answered only once the events and finishes read before it are
		// taken (Broker.Reported): an answer tells the provider funduq
		// has them.
		reported := s.Broker.Reported(c)
		queries.Add(1)
		go func() {
			defer queries.Done()
			defer func() { <-querySlots }()
			if reported(ctx) {
				s.answerQuery(ctx, c, f)
			}
		}()
	}
}

// queryBusyKept answers a query read while every query place is taken and
// reports the link sent before its register are kept for it.
const queryBusyKept = "every query place is taken by queries waiting for the reports this link sent before its register, which wait for that register: send register, then ask again"

// querySlot takes one of the link's query places for q, and reports
// whether it did: not when the link closes first, nor when, every place
// taken, reports the link sent before its register are kept for it
// (design.md D7). The queries holding the places then wait for those
// reports, which wait for the register, which is read only after q: q is
// answered at once with an error, and the link is read on.
func (s *Server) querySlot(c *Conn, slots chan struct{}, q wire.Query) bool {
	select {
	case slots <- struct{}{}:
		return true
	default:
	}
	// Every slot taken: the link is not read until one frees, which the
	// broker must know of so that an answer waiting unread behind this
	// query is not counted as silence.
	end := s.Broker.Stalled(c)
	defer end()
	for {
		kept, changed := s.Broker.KeptForRegister(c)
		if kept {
			res := wire.QueryResult{Type: wire.TypeQueryResult, QueryID: q.QueryID, Error: queryBusyKept}
			if b, err := wire.Marshal(res); err == nil {
				_ = c.SendAnswerWhenRoom(b)
			}
			return false
		}
		select {
		case slots <- struct{}{}:
			return true
		case <-changed:
		case <-c.Closed():
			return false
		}
	}
}

func (s *Server) register(ctx context.Context, c *Conn, f wire.Register) {
	err := s.Broker.Register(ctx, c, f.Agents, f.ProviderName, func(names []string) {
		// Registered: the deadline is over, and the link no longer
		// pending, before the provider reads so.
		c.deadline.Met()
		c.place.Leave()
		s.send(c, wire.Registered{Type: wire.TypeRegistered, Names: names})
	})
	if err != nil {
		if errors.Is(err, broker.ErrNotLeading) {
			c.Close("this funduq node stopped leading; reconnect")
			return
		}
		msg, code := refusal(err)
		s.send(c, wire.RegisterRefusal(code, msg))
	}
}

func (s *Server) answerQuery(ctx context.Context, c *Conn, q wire.Query) {
	res := wire.QueryResult{Type: wire.TypeQueryResult, QueryID: q.QueryID}
	defer func() {
		// An answer the provider asked for: bounded by what it reads. It
		// waits, holding its query slot, for the answers before it to be
		// written (wsconn.SendAnswerWhenRoom): the slots bound the answers
		// being read, not those waiting, so a provider asking for many
		// long threads at once and reading them at its network's pace was
		// cut off as not reading. One that never reads is cut off by the
		// write timeout, holding at most the bound and a slot's answer each.
		if b, err := wire.Marshal(res); err == nil {
			_ = c.SendAnswerWhenRoom(b)
		}
	}()
	if q.Method != "thread_messages" {
		res.Error = fmt.Sprintf("unknown query method %q", wsconn.Clip(q.Method, 64))
		return
	}
	// Each param read on its own, so a refusal names the one at fault, and
	// by its exact name (design.md §The provider wire, "Exact names").
	if m, f := wire.MemberVariant(q.Params, wire.ThreadMessagesParamNames...); m != "" {
		res.Error = "thread_messages refused: params " + wire.CaseVariantMessage(m, f)
		return
	}
	var raw struct {
		ThreadID json.RawMessage `json:"threadId"`
		Limit    json.RawMessage `json:"limit"`
	}
	var threadID string
	if json.Unmarshal(q.Params, &raw) != nil || json.Unmarshal(raw.ThreadID, &threadID) != nil || threadID == "" {
		res.Error = "thread_messages needs params.threadId"
		return
	}
	limit := 0
	if len(raw.Limit) > 0 && string(raw.Limit) != "null" {
		if json.Unmarshal(raw.Limit, &limit) != nil || limit <= 0 {
			res.Error = "limit must be a positive integer"
			return
		}
	}
	p := wire.ThreadMessagesParams{ThreadID: threadID}
	timeout := s.QueryTimeout
	if timeout <= 0 {
		timeout = queryTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// The answer is one frame, bounded like the frames funduq reads from
	// a provider (FUNDUQ_MAX_FRAME_BYTES): a provider reading with the same
	// bound would lose its link on a longer one, and ask again for good.
	// The envelope's own bytes come out of the bound.
	budget := int(wsconn.Limit(s.MaxFrame)) - 1024
	msgs, err := s.Broker.ThreadMessages(ctx, c, p.ThreadID, limit, budget)
	if err != nil {
		switch {
		case errors.Is(err, broker.ErrNoSuchThread):
			res.Error = broker.ErrNoSuchThread.Error()
		case errors.Is(err, broker.ErrQueriesBusy):
			res.Error = broker.ErrQueriesBusy.Error() // logged by the broker
		case errors.Is(err, store.ErrTooLarge):
			res.Error = fmt.Sprintf("the thread's messages exceed one answer (%d bytes); ask for the newest with a smaller limit", budget)
		default:
			c.log.Warn("thread_messages query failed", "thread_id", p.ThreadID, "err", err)
			res.Error = wire.QueryUnreadMessage
		}
		return
	}
	if msgs == nil {
		msgs = []json.RawMessage{}
	}
	res.Result, _ = wire.Marshal(msgs)
}

// refusal is what a provider is told of a refused register or deleteAgent:
// the broker's own refusal messages, never a driver's, and, for a register,
// whether sending it again can help (design.md §The provider wire,
// "Refusal codes"). A RegisterError is for good; the served cap, a
// withdrawn link (a new link is served again) and funduq's own trouble
// are of the moment.
func refusal(err error) (msg, code string) {
	var re *broker.RegisterError
	var rl *broker.RetryLaterError
	switch {
	case errors.As(err, &re):
		return re.Msg, wire.CodeRegisterRefused
	case errors.As(err, &rl):
		return rl.Msg, wire.CodeRetryLater
	case errors.Is(err, broker.ErrWithdrawn):
		return broker.ErrWithdrawn.Error(), wire.CodeRetryLater
	}
	return "funduq could not complete this request right now; try again", wire.CodeRetryLater
}
