package kyokrelay

import (
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// errClosed: the link is closed; nothing more can be sent on it.
var errClosed = errors.New("kyok link closed")

const (
	sendQueue    = 4096
	writeTimeout = 10 * time.Second
	pingEvery    = 30 * time.Second
	readIdle     = 2*pingEvery + 15*time.Second
	maxFrame     = 8 << 20
)

// conn is one LLM provider's open /ws/kyok link.
type conn struct {
	ws     *websocket.Conn
	key    string
	out    chan []byte
	closed chan struct{}
	once   sync.Once
	code   int
	reason string
	log    *slog.Logger

	// Guarded by Relay.mu.
	names    map[string]bool        // the offerings this link registered
	inflight map[string]*completion // completions delivered on this link
}

func newConn(ws *websocket.Conn, key string, log *slog.Logger) *conn {
	return &conn{ws: ws, key: key, out: make(chan []byte, sendQueue), closed: make(chan struct{}), log: log,
		names: map[string]bool{}, inflight: map[string]*completion{}}
}

// send queues frame for the writer; a full queue closes the link.
func (c *conn) send(frame []byte) error {
	select {
	case <-c.closed:
		return errClosed
	default:
	}
	select {
	case c.out <- frame:
		return nil
	default:
		c.closeWith(websocket.CloseTryAgainLater, "LLM provider is not reading its link")
		return errClosed
	}
}

func (c *conn) close(reason string) { c.closeWith(websocket.CloseGoingAway, reason) }

func (c *conn) closeWith(code int, reason string) {
	c.once.Do(func() {
		c.code, c.reason = code, reason
		close(c.closed)
	})
}

// writer is the link's only writer: queued frames, pings and the close.
func (c *conn) writer(done chan<- struct{}) {
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
