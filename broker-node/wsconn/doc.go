// Package wsconn is the writing side shared by the broker node's two
// WebSocket links (/ws/provider and /ws/kyok): one serialized writer per
// link — the only goroutine that writes the socket — fed by a bounded queue
// that never blocks a sender, periodic pings, and a close that flushes what
// was queued and then says why.
package wsconn
