package link

import (
	"log/slog"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/broker-node/wsconn"
)

// ErrClosed: the link is closed; nothing more can be sent on it.
var ErrClosed = wsconn.ErrClosed

// Conn is one provider's open link. It implements broker.Link.
type Conn struct {
	*wsconn.Conn
	key string
	log *slog.Logger
	// deadline is the register deadline (Server.serve).
	deadline *wsconn.RegisterDeadline
	// pending gives the link's place among those not registered back
	// (Server.Pending); idempotent.
	pending func()
}

func newConn(ws *websocket.Conn, key string, log *slog.Logger) *Conn {
	return &Conn{Conn: wsconn.New(ws, "provider is not reading its link"), key: key, log: log, deadline: &wsconn.RegisterDeadline{}, pending: func() {}}
}

// Key is the provider's public key.
func (c *Conn) Key() string { return c.key }
