// Package link serves GET /ws/provider: it upgrades the connection, runs the
// v4 handshake, and then keeps one provider's link — one read loop that
// processes frames in arrival order, handing acks, events and finishes to
// the broker before reading the next frame, and one serialized writer. After
// the handshake nothing a provider sends closes the link: a bad frame is
// answered with an error frame.
package link
