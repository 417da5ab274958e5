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
	// place is the link's standing among those not registered
	// (Relay.Pending).
	place *wsconn.Place

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
		place: wsconn.NewPlace(nil, nil)}
}

// pendingAgain counts the link pending again and starts its register
// deadline over when it serves nothing and has no completion in flight,
// as a link that never registered (design.md §The provider wire,
// "Admission"). Caller holds Relay.mu, under which a register takes it
// out of pending.
func (c *conn) pendingAgain() {
	if len(c.names) == 0 && len(c.inflight) == 0 && c.place.Retake() {
		c.deadline.Restart()
		c.log.Info("LLM provider link serves nothing: pending again until it registers")
	}
}

// send queues frame for the writer; a full queue closes the link.
func (c *conn) send(frame []byte) error { return c.Send(frame) }

// close ends the link with reason.
func (c *conn) close(reason string) { c.Close(reason) }
