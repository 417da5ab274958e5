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
	// place is the link's standing among those not registered
	// (Server.Pending).
	place *wsconn.Place
}

func newConn(ws *websocket.Conn, key string, log *slog.Logger) *Conn {
	return &Conn{Conn: wsconn.New(ws, "provider is not reading its link"), key: key, log: log, deadline: &wsconn.RegisterDeadline{}, place: wsconn.NewPlace(nil, nil)}
}

// Key is the provider's public key.
func (c *Conn) Key() string { return c.key }

// pendingAgain counts the link pending again and starts its register
// deadline over: a delete left it serving nothing and it holds no run, as
// a link that never registered (design.md §The provider wire,
// "Admission"). Called under the broker's lock (Broker.WhenBare).
func (c *Conn) pendingAgain() {
	if c.place.Retake() {
		c.deadline.Restart()
		c.log.Info("provider link serves nothing: pending again until it registers")
	}
}
