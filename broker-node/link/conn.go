package link

import (
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// ErrClosed: the link is closed; nothing more can be sent on it.
var ErrClosed = errors.New("provider link closed")

const (
	// sendQueue bounds frames waiting for the writer; a provider that
	// stops reading for that long is cut off rather than buffered forever.
	sendQueue    = 4096
	writeTimeout = 10 * time.Second
	pingEvery    = 30 * time.Second
	// readIdle is how long a link may be silent, pongs included, before
	// it is taken for dead.
	readIdle = 2*pingEvery + 15*time.Second
	// maxFrame bounds one inbound frame.
	maxFrame = 8 << 20
)

// Conn is one provider's open link. It implements broker.Link.
type Conn struct {
	ws     *websocket.Conn
	key    string
	out    chan []byte
	closed chan struct{}
	once   sync.Once
	code   int
	reason string
	log    *slog.Logger
}

func newConn(ws *websocket.Conn, key string, log *slog.Logger) *Conn {
	return &Conn{ws: ws, key: key, out: make(chan []byte, sendQueue), closed: make(chan struct{}), log: log}
}

// Key is the provider's public key.
func (c *Conn) Key() string { return c.key }

// Send queues frame for the writer. It never blocks: a full queue closes the
// link (the provider is not reading).
func (c *Conn) Send(frame []byte) error {
	select {
	case <-c.closed:
		return ErrClosed
	default:
	}
	select {
	case c.out <- frame:
		return nil
	default:
		c.closeWith(websocket.CloseTryAgainLater, "provider is not reading its link")
		return ErrClosed
	}
}

// Close ends the link (the broker stopped leading, say) with reason.
func (c *Conn) Close(reason string) { c.closeWith(websocket.CloseGoingAway, reason) }

func (c *Conn) closeWith(code int, reason string) {
	c.once.Do(func() {
		c.code, c.reason = code, reason
		close(c.closed)
	})
}

// writer is the link's only writer: queued frames, pings, and the close.
func (c *Conn) writer(done chan<- struct{}) {
	defer close(done)
	ping := time.NewTicker(pingEvery)
	defer ping.Stop()
	for {
		select {
		case f := <-c.out:
			_ = c.ws.SetWriteDeadline(time.Now().Add(writeTimeout))
			if err := c.ws.WriteMessage(websocket.TextMessage, f); err != nil {
				c.closeWith(websocket.CloseAbnormalClosure, "write failed")
				_ = c.ws.Close()
				return
			}
		case <-ping.C:
			if err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(writeTimeout)); err != nil {
				c.closeWith(websocket.CloseAbnormalClosure, "ping failed")
				_ = c.ws.Close()
				return
			}
		case <-c.closed:
			// Flush what was queued before the close, then say why.
		flush:
			for {
				select {
				case f := <-c.out:
					_ = c.ws.SetWriteDeadline(time.Now().Add(writeTimeout))
					if c.ws.WriteMessage(websocket.TextMessage, f) != nil {
						_ = c.ws.Close()
						return
					}
				default:
					break flush
				}
			}
			if c.code != websocket.CloseAbnormalClosure {
				msg := websocket.FormatCloseMessage(c.code, clip(c.reason, 123))
				_ = c.ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(time.Second))
			}
			_ = c.ws.Close()
			return
		}
	}
}

func clip(s string, n int) string {
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
