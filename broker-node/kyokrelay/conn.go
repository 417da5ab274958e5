package kyokrelay

import (
	"log/slog"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/broker-node/wsconn"
)

// conn is one LLM provider's open /ws/kyok link.
type conn struct {
	*wsconn.Conn
	key string
	log *slog.Logger
	// deadline is the register deadline (Relay.ServeHTTP).
	deadline *wsconn.RegisterDeadline
	// pending gives the link's place among those not registered back
	// (Relay.Pending); idempotent.
	pending func()

	// Guarded by Relay.mu.
	names map[string]bool // the offerings this link registered
	// registeredAt orders the key's links by their last register: when
	// the serving link closes, the most recent other one serves.
	registeredAt uint64
	inflight     map[string]*completion // completions delivered on this link
}

func newConn(ws *websocket.Conn, key string, log *slog.Logger) *conn {
	return &conn{Conn: wsconn.New(ws, "LLM provider is not reading its link"), key: key, log: log,
		names: map[string]bool{}, inflight: map[string]*completion{}, deadline: &wsconn.RegisterDeadline{},
		pending: func() {}}
}

// send queues frame for the writer; a full queue closes the link.
func (c *conn) send(frame []byte) error { return c.Send(frame) }

// close ends the link with reason.
func (c *conn) close(reason string) { c.Close(reason) }
