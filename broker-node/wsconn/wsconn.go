package wsconn

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
)

// ErrClosed: the link is closed; nothing more can be sent on it.
var ErrClosed = errors.New("link closed")

const (
	// sendQueue bounds the frames waiting for the writer that the peer's
	// own frames called for (answers, refusals, notices); a peer that stops
	// reading for that long is cut off rather than buffered forever. Offers
	// (SendNow) are not counted: they are funduq's own, one per run at a
	// time, and a burst of them to an honest reader is not its fault.
	sendQueue = 4096
	// sendQueueBytes is the least byte bound on the answers among those
	// frames, what the peer asked for (SendAnswer, QueueBytes): a count alone let
	// a peer that asks for large answers (a thread's messages, up to the
	// frame limit each) and reads none make the leader hold thousands.
	sendQueueBytes = 64 << 20
	writeTimeout   = 10 * time.Second
	// closeGrace is how long a close waits for a SendNow caller's write
	// before it cuts the write short.
	closeGrace = 250 * time.Millisecond
	// PingEvery is how often the writer pings the peer. It goes on while
	// the link's reader is paused (a broker that stops reading a provider
	// whose events it cannot store yet), so the peer can tell a broker that
	// is alive but not reading from one that is gone.
	PingEvery = 30 * time.Second
	// ReadIdle is how long a link may be silent, pongs included, before
	// it is taken for dead.
	ReadIdle = 2*PingEvery + 15*time.Second
	// CloseDrain bounds how long a link closed by CloseDraining is still
	// read after funduq's close frame, waiting for the peer's.
	CloseDrain = 5 * time.Second
	// MaxFrame bounds one inbound frame by default (config
	// BrokerLimits.MaxFrame); a larger frame closes the link with 1009
	// (message too big), or is read through and refused on a link read
	// by ReadLoopLimited.
	MaxFrame = 8 << 20
)

// QueueBytes is the byte bound on the answers in a link's send queue for links whose
// largest frame is maxFrame (a query's answer is bounded by the frame
// limit): room for eight answers, a link's queries at once, and a frame
// more, and never less than sendQueueBytes.
func QueueBytes(maxFrame int64) int64 { return max(sendQueueBytes, 9*Limit(maxFrame)) }

// Limit is the read limit for a configured frame size: n, or MaxFrame
// when n is not positive.
func Limit(n int64) int64 {
	if n > 0 {
		return n
	}
	return MaxFrame
}

// Conn is the writing side of one open link: a bounded send queue, the
// one goroutine that writes it (frames, pings, the close), and the close
// with its reason.
type Conn struct {
	WS  *websocket.Conn
	mu  sync.Mutex
	out []outFrame // frames waiting to be written, in order; allocated as they come
	// counted is how many of out count against sendQueue (not offers).
	counted int
	// answers is the bytes of the answers (SendAnswer) in out and of those
	// a drain took from it and has not written yet: what the byte bound
	// counts. Offers and cancels are not in it, so funduq's own burst is
	// never taken for a peer not reading what it asked for.
	answers atomic.Int64
	// room, when not nil, is closed (under mu) when an answer is written:
	// a SendAnswerWhenRoom caller waits on it.
	room chan struct{}
	// answerMu is held by a SendAnswerWhenRoom caller from its check for
	// room to its answer queued, so no other answer takes that room.
	answerMu sync.Mutex
	// writing is held by whoever writes frames: the writer goroutine, or a
	// SendNow caller that found the link idle. Taken and given back under
	// mu, and given back only with out empty, so no frame is left behind.
	writing bool
	idle    chan struct{} // closed when writing is given back, for a close waiting on it
	wake    chan struct{} // the writer's doorbell (capacity 1)
	closed  chan struct{}
	// stop is closed when the reader is to stop: with closed, or for a
	// draining close once the peer answered it (ReadDone) or CloseDrain
	// passed.
	stop     chan struct{}
	stopOnce sync.Once
	readDone chan struct{}
	readOnce sync.Once
	draining bool // closed by CloseDraining
	once     sync.Once
	code     int
	reason   string
	cut      bool   // closed for the peer's side: it stopped reading, its socket failed
	slowMsg  string // the close reason for a peer that stopped reading
	// Ping overrides PingEvery (tests); set before Writer starts.
	Ping time.Duration
	// WriteTimeout overrides the bound on one frame's write (tests); set
	// before the link is used.
	WriteTimeout time.Duration
	// MaxQueued bounds the bytes of answers waiting for the writer that
	// an answer may join (SendAnswer; 0: QueueBytes(MaxFrame)); set before
	// the link is used.
	MaxQueued int64
}

// outFrame is one frame waiting for the writer; answer marks one
// SendAnswer queued, counted in Conn.answers until written; offer one
// SendNow queued, not counted against sendQueue.
type outFrame struct {
	b      []byte
	answer bool
	offer  bool
}

// size is what the frame counts in Conn.answers.
func (f outFrame) size() int64 {
	if f.answer {
		return int64(len(f.b))
	}
	return 0
}

// New wraps ws; slowMsg is the close reason for a peer whose queue fills.
func New(ws *websocket.Conn, slowMsg string) *Conn {
	return &Conn{WS: ws, wake: make(chan struct{}, 1), closed: make(chan struct{}), stop: make(chan struct{}),
		readDone: make(chan struct{}), slowMsg: slowMsg}
}

func (c *Conn) writeTimeout() time.Duration {
	if c.WriteTimeout > 0 {
		return c.WriteTimeout
	}
	return writeTimeout
}

// Closed is closed once the link is.
func (c *Conn) Closed() <-chan struct{} { return c.closed }

// Send queues frame for the writer. It never blocks: a full queue closes the
// link (the provider is not reading).
func (c *Conn) Send(frame []byte) error { return c.send(outFrame{b: frame}) }

// SendAnswer is Send for a frame the peer asked for (a query's answer): it
// also closes the link, as a peer that is not reading, when the answers
// waiting would pass MaxQueued in bytes with it. What funduq sends of its
// own accord is not in those bytes (cancels count against the frame
// bound; offers, SendNow, not even that), so a burst of offers to a
// provider coming back is not taken for a peer not reading; what a peer
// asks for is bounded by what it reads.
func (c *Conn) SendAnswer(frame []byte) error { return c.send(outFrame{b: frame, answer: true}) }

// SendAnswerWhenRoom is SendAnswer for a caller that can wait (a query's
// own goroutine, holding one of its link's query slots): while the answers
// waiting leave no room for frame under MaxQueued, it waits for the writer
// to write some, or for the link to close (ErrClosed). A provider that asks
// for more than its network carries at once is slowed, not cut off; one
// that reads nothing is cut off by the write timeout, the answers held
// meanwhile bounded by MaxQueued and the link's query slots.
func (c *Conn) SendAnswerWhenRoom(frame []byte) error {
	c.answerMu.Lock()
	defer c.answerMu.Unlock()
	for {
		c.mu.Lock()
		waiting := c.answers.Load()
		if waiting == 0 || waiting+int64(len(frame)) <= c.answerBound() {
			c.mu.Unlock()
			// Only answerMu's holder adds answers, so the room is there.
			return c.SendAnswer(frame)
		}
		if c.room == nil {
			c.room = make(chan struct{})
		}
		room := c.room
		c.mu.Unlock()
		select {
		case <-room:
		case <-c.closed:
			return ErrClosed
		}
	}
}

// written gives back an answer's bytes once the writer wrote it, and
// wakes a SendAnswerWhenRoom caller waiting for room.
func (c *Conn) written(f outFrame) {
	if !f.answer {
		return
	}
	c.answers.Add(-f.size())
	c.mu.Lock()
	if c.room != nil {
		close(c.room)
		c.room = nil
	}
	c.mu.Unlock()
}

func (c *Conn) answerBound() int64 {
	if c.MaxQueued > 0 {
		return c.MaxQueued
	}
	return QueueBytes(MaxFrame)
}

func (c *Conn) send(f outFrame) error {
	select {
	case <-c.closed:
		return ErrClosed
	default:
	}
	bound := c.answerBound()
	c.mu.Lock()
	// An answer with no other waiting is always taken, however large.
	waiting := c.answers.Load()
	if !f.offer && c.counted >= sendQueue || f.answer && waiting > 0 && waiting+f.size() > bound {
		c.mu.Unlock()
		c.cutOff(websocket.CloseTryAgainLater, c.slowMsg)
		return ErrClosed
	}
	c.out = append(c.out, f)
	if !f.offer {
		c.counted++
	}
	c.answers.Add(f.size())
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return nil
}

// SendNow is Send for a frame whose latency counts (a run offered): when
// nothing is being written or waits, the caller writes it at once rather
// than waking the writer, and then writes whatever was queued meanwhile.
// Queued, it does not count against the bound on frames waiting: offers
// are funduq's own, at most one per run at a time, so a burst of them to
// a provider coming back to thousands of queued runs (no
// maxConcurrentRuns) is never taken for a peer not reading. A peer that
// reads nothing is cut off by the write timeout instead.
// It may then block on the network when the peer stopped reading: for at
// most the write timeout, or until the link is closed (a close cuts the
// write short after closeGrace); a failed write closes the link and
// returns ErrClosed. Otherwise it queues, as Send does. Never call it
// holding a lock that others wait on.
func (c *Conn) SendNow(frame []byte) error {
	select {
	case <-c.closed:
		return ErrClosed
	default:
	}
	c.mu.Lock()
	if c.writing || len(c.out) > 0 {
		c.mu.Unlock()
		return c.send(outFrame{b: frame, offer: true})
	}
	c.writing = true
	c.out = append(c.out, outFrame{b: frame, offer: true})
	c.mu.Unlock()
	if !c.drain() {
		return ErrClosed
	}
	return nil
}

// acquire takes the writing turn if nobody holds it.
func (c *Conn) acquire() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.writing {
		return false
	}
	c.writing = true
	return true
}

// drain writes the queue until it is empty, then gives the writing turn
// back; the caller holds it. It reports false when a write failed (the
// link is then closed). A link cut off because its peer stopped reading
// is not drained further: what waits is dropped, and the close follows.
func (c *Conn) drain() bool {
	for {
		c.mu.Lock()
		fs := c.out
		c.out, c.counted = nil, 0
		if len(fs) == 0 || c.CutOff() {
			c.answers.Store(0)
			c.releaseLocked()
			c.mu.Unlock()
			return true
		}
		c.mu.Unlock()
		for i, f := range fs {
			if i > 0 && c.CutOff() {
				break // the next round drops the rest
			}
			c.written(f)
			_ = c.WS.SetWriteDeadline(time.Now().Add(c.writeTimeout()))
			if err := c.WS.WriteMessage(websocket.TextMessage, f.b); err != nil {
				c.cutOff(websocket.CloseAbnormalClosure, "write failed: "+err.Error())
				_ = c.WS.Close()
				c.mu.Lock()
				c.out, c.counted = nil, 0
				c.releaseLocked()
				c.mu.Unlock()
				return false
			}
		}
	}
}

// releaseLocked gives the writing turn back; c.mu is held.
func (c *Conn) releaseLocked() {
	c.writing = false
	if c.idle != nil {
		close(c.idle)
		c.idle = nil
	}
}

// awaitTurn takes the writing turn for the close, waiting for a SendNow
// caller that holds it. A healthy write ends at once; one still blocked
// after closeGrace (a peer that stopped reading) is cut short by a write
// deadline in the past, so a closing link never holds its caller, a lane,
// for the whole write timeout. It reports false when the turn did not
// come back even so.
func (c *Conn) awaitTurn() bool {
	cut := false
	for {
		c.mu.Lock()
		if !c.writing {
			c.writing = true
			c.mu.Unlock()
			return true
		}
		if c.idle == nil {
			c.idle = make(chan struct{})
		}
		idle := c.idle
		c.mu.Unlock()
		wait := closeGrace
		if cut {
			wait = time.Second
		}
		t := time.NewTimer(wait)
		select {
		case <-idle:
			t.Stop()
		case <-t.C:
			if cut {
				return false
			}
			// The websocket is unusable after a timed-out write; it is
			// closing anyway.
			_ = c.WS.UnderlyingConn().SetWriteDeadline(time.Now())
			cut = true
		}
	}
}

// Close ends the link (the broker stopped leading, say) with reason.
func (c *Conn) Close(reason string) { c.CloseWith(websocket.CloseGoingAway, reason) }

// CloseWith ends the link with a close code and reason.
func (c *Conn) CloseWith(code int, reason string) { c.closeWith(code, reason, false) }

// cutOff ends the link for the peer's side of it: it stopped reading (its
// queue filled), or a write or ping to it failed.
func (c *Conn) cutOff(code int, reason string) { c.closeWith(code, reason, true) }

// CloseDraining ends the link as Close does, except that its reader
// goes on reading until the peer answers the close frame (ReadDone), or
// CloseDrain passes: a peer may write until the close reaches it (RFC 6455
// §5.5.1), and what it wrote meanwhile is read, not cut off unread. Nothing
// is written after the close frame, so what is read then cannot be
// answered.
func (c *Conn) CloseDraining(reason string) {
	c.once.Do(func() {
		c.code, c.reason, c.draining = websocket.CloseGoingAway, reason, true
		close(c.closed)
	})
}

func (c *Conn) closeWith(code int, reason string, cut bool) {
	c.once.Do(func() {
		c.code, c.reason, c.cut = code, reason, cut
		close(c.closed)
		c.stopReading()
	})
}

func (c *Conn) stopReading() { c.stopOnce.Do(func() { close(c.stop) }) }

// ReadStop is closed when the link's reader is to stop reading: at the
// close, or for CloseDraining once the drain is over.
func (c *Conn) ReadStop() <-chan struct{} { return c.stop }

// Draining reports whether the link was closed by CloseDraining: what is
// read now comes after funduq's close frame.
func (c *Conn) Draining() bool {
	select {
	case <-c.closed:
		return c.draining
	default:
		return false
	}
}

// ReadDone tells the writer that the reader has stopped, so a draining
// close need not wait any longer.
func (c *Conn) ReadDone() { c.readOnce.Do(func() { close(c.readDone) }) }

// CutOff reports whether the link was closed because the peer stopped
// reading or its socket failed, not by Close or CloseWith: the peer said no
// goodbye, and nothing says it stopped working (false while open).
func (c *Conn) CutOff() bool {
	select {
	case <-c.closed:
		return c.cut
	default:
		return false
	}
}

// Writer writes what Send queues, pings the peer, and makes the close; it
// closes done when it returns.
func (c *Conn) Writer(done chan<- struct{}) {
	defer close(done)
	defer c.stopReading() // the socket is closed: nothing more to read
	every := c.Ping
	if every <= 0 {
		every = PingEvery
	}
	ping := time.NewTicker(every)
	defer ping.Stop()
	for {
		select {
		case <-c.wake:
			// A SendNow caller holding the turn writes what was queued.
			if c.acquire() && !c.drain() {
				return
			}
		case <-ping.C:
			if err := c.WS.WriteControl(websocket.PingMessage, nil, time.Now().Add(c.writeTimeout())); err != nil {
				c.cutOff(websocket.CloseAbnormalClosure, "ping failed: "+err.Error())
				_ = c.WS.Close()
				return
			}
		case <-c.closed:
			// Flush what was queued before the close, then say why.
			if !c.awaitTurn() {
				_ = c.WS.Close()
				return
			}
			c.mu.Lock()
			fs := c.out
			c.out, c.counted = nil, 0
			c.mu.Unlock()
			if c.cut {
				// The peer stopped reading: the backlog would hold the
				// writer (and the link's goroutine, and a node stopping)
				// for a write timeout per frame to a peer reading a
				// little now and then. Only the close goes, saying why.
				fs = nil
			}
			for _, f := range fs {
				_ = c.WS.SetWriteDeadline(time.Now().Add(c.writeTimeout()))
				if c.WS.WriteMessage(websocket.TextMessage, f.b) != nil {
					_ = c.WS.Close()
					return
				}
			}
			if c.code != websocket.CloseAbnormalClosure {
				msg := websocket.FormatCloseMessage(c.code, Clip(c.reason, 123))
				if c.WS.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second)) == nil && c.draining {
					// The reader takes what the peer sent before the
					// close reached it, up to the peer's own close.
					t := time.NewTimer(CloseDrain)
					select {
					case <-c.readDone:
					case <-t.C:
					}
					t.Stop()
				}
			}
			c.stopReading()
			_ = c.WS.Close()
			return
		}
	}
}

// Clip cuts s to at most n bytes without splitting a UTF-8 sequence (a
// close reason must fit in a control frame).
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && s[len(s)-1]&0xC0 == 0x80 {
		s = s[:len(s)-1]
	}
	if len(s) > 0 && s[len(s)-1] >= 0xC0 {
		s = s[:len(s)-1]
	}
	return s
}

// Reason says why the link was closed ("" while open): the reason given to
// Close, or, for a link cut off, what failed — a write or a ping with its
// error (a peer that stopped reading: an i/o timeout).
func (c *Conn) Reason() string {
	select {
	case <-c.closed:
		return c.reason
	default:
		return ""
	}
}
