package link

import (
	"log/slog"
	"sync"

	"github.com/gorilla/websocket"
	"github.com/jonboulle/clockwork"

	"github.com/funduq/funduq-go/broker-node/wsconn"
)

// ErrClosed: the link is closed; nothing more can be sent on it.
var ErrClosed = wsconn.ErrClosed

// Conn is one provider's open link. It implements broker.Link.
type Conn struct {
	*wsconn.Conn
	key string
	log *slog.Logger
	// deadline is the register deadline's state (Server.registerDeadline):
	// which of a register and the deadline came first.
	deadline struct {
		sync.Mutex
		timer  clockwork.Timer
		done   bool // a register was answered "registered"
		lapsed bool // the deadline passed first
	}
}

// registered ends the register deadline: a register was answered.
func (c *Conn) registered() {
	c.deadline.Lock()
	defer c.deadline.Unlock()
	if c.deadline.done || c.deadline.lapsed {
		return
	}
	c.deadline.done = true
	if c.deadline.timer != nil {
		c.deadline.timer.Stop()
	}
}

// lapse reports whether the deadline passed before any register was
// answered, and marks it so.
func (c *Conn) lapse() bool {
	c.deadline.Lock()
	defer c.deadline.Unlock()
	if c.deadline.done {
		return false
	}
	c.deadline.lapsed = true
	return true
}

// lapsed reports whether the link was closed for not registering in time.
func (c *Conn) lapsed() bool {
	c.deadline.Lock()
	defer c.deadline.Unlock()
	return c.deadline.lapsed
}

func newConn(ws *websocket.Conn, key string, log *slog.Logger) *Conn {
	return &Conn{Conn: wsconn.New(ws, "provider is not reading its link"), key: key, log: log}
}

// Key is the provider's public key.
func (c *Conn) Key() string { return c.key }
