package wsconn

import (
	"errors"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// ErrClosed: the link is closed; nothing more can be sent on it.
var ErrClosed = errors.New("link closed")

const (
	// sendQueue bounds frames waiting for the writer; a peer that stops
	// reading for that long is cut off rather than buffered forever.
	sendQueue    = 4096
	writeTimeout = 10 * time.Second
	// PingEvery is how often the writer pings the peer. It goes on while
	// the link's reader is paused (a broker that stops reading a provider
	// whose events it cannot store yet), so the peer can tell a broker that
	// is alive but not reading from one that is gone.
	PingEvery = 30 * time.Second
	// ReadIdle is how long a link may be silent, pongs included, before
	// it is taken for dead.
	ReadIdle = 2*PingEvery + 15*time.Second
	// MaxFrame bounds one inbound frame by default (config
	// BrokerLimits.MaxFrame); a larger frame closes the link with 1009
	// (message too big).
	MaxFrame = 8 << 20
)

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
	WS      *websocket.Conn
	mu      sync.Mutex
	out     [][]byte      // frames waiting for the writer, in order; allocated as they come
	wake    chan struct{} // the writer's doorbell (capacity 1)
	closed  chan struct{}
	once    sync.Once
	code    int
	reason  string
	slowMsg string // the close reason for a peer that stopped reading
	// Ping overrides PingEvery (tests); set before Writer starts.
	Ping time.Duration
}

// New wraps ws; slowMsg is the close reason for a peer whose queue fills.
func New(ws *websocket.Conn, slowMsg string) *Conn {
	return &Conn{WS: ws, wake: make(chan struct{}, 1), closed: make(chan struct{}), slowMsg: slowMsg}
}

// Closed is closed once the link is.
func (c *Conn) Closed() <-chan struct{} { return c.closed }

// Send queues frame for the writer. It never blocks: a full queue closes the
// link (the provider is not reading).
func (c *Conn) Send(frame []byte) error {
	select {
	case <-c.closed:
		return ErrClosed
	default:
	}
	c.mu.Lock()
	if len(c.out) >= sendQueue {
		c.mu.Unlock()
		c.CloseWith(websocket.CloseTryAgainLater, c.slowMsg)
		return ErrClosed
	}
	c.out = append(c.out, frame)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return nil
}

// takeAll empties the queue. An idle link keeps no queue memory.
func (c *Conn) takeAll() [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	fs := c.out
	c.out = nil
	return fs
}

// Close ends the link (the broker stopped leading, say) with reason.
func (c *Conn) Close(reason string) { c.CloseWith(websocket.CloseGoingAway, reason) }

// CloseWith ends the link with a close code and reason.
func (c *Conn) CloseWith(code int, reason string) {
	c.once.Do(func() {
		c.code, c.reason = code, reason
		close(c.closed)
	})
}

// Writer is the link's only writer; it closes done when it returns.
func (c *Conn) Writer(done chan<- struct{}) {
	defer close(done)
	every := c.Ping
	if every <= 0 {
		every = PingEvery
	}
	ping := time.NewTicker(every)
	defer ping.Stop()
	for {
		select {
		case <-c.wake:
			for _, f := range c.takeAll() {
				_ = c.WS.SetWriteDeadline(time.Now().Add(writeTimeout))
				if err := c.WS.WriteMessage(websocket.TextMessage, f); err != nil {
					c.CloseWith(websocket.CloseAbnormalClosure, "write failed")
					_ = c.WS.Close()
					return
				}
			}
		case <-ping.C:
			if err := c.WS.WriteControl(websocket.PingMessage, nil, time.Now().Add(writeTimeout)); err != nil {
				c.CloseWith(websocket.CloseAbnormalClosure, "ping failed")
				_ = c.WS.Close()
				return
			}
		case <-c.closed:
			// Flush what was queued before the close, then say why.
			for _, f := range c.takeAll() {
				_ = c.WS.SetWriteDeadline(time.Now().Add(writeTimeout))
				if c.WS.WriteMessage(websocket.TextMessage, f) != nil {
					_ = c.WS.Close()
					return
				}
			}
			if c.code != websocket.CloseAbnormalClosure {
				msg := websocket.FormatCloseMessage(c.code, Clip(c.reason, 123))
				_ = c.WS.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second))
			}
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
