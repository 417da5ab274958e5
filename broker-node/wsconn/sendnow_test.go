package wsconn_test

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/broker-node/wsconn"
)

// pair is a wsconn.Conn on the server side of a real loopback WebSocket,
// its writer running, and the client side for the test to read (or not).
type pair struct {
	c      *wsconn.Conn
	client *websocket.Conn
	done   chan struct{} // closed when the writer returns
}

func newPair(t *testing.T, writeTimeout time.Duration) *pair {
	t.Helper()
	conns := make(chan *websocket.Conn, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			t.Error(err)
			return
		}
		conns <- ws
	}))
	t.Cleanup(srv.Close)
	client, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	p := &pair{c: wsconn.New(<-conns, "peer is not reading"), client: client, done: make(chan struct{})}
	p.c.WriteTimeout = writeTimeout
	go p.c.Writer(p.done)
	t.Cleanup(func() {
		p.c.Close("test over")
		_ = client.Close()
		<-p.done
	})
	return p
}

// Frames sent by SendNow and Send from several goroutines at once all
// arrive, once each, each goroutine's in the order it sent them: a frame
// queued while a caller writes is written by that caller (or the writer)
// after the one being written, never lost or overtaken.
func TestSendNowAndSendKeepEverySendersOrder(t *testing.T) {
	p := newPair(t, 0)
	const senders, each = 6, 300
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := range each {
				f := []byte(fmt.Sprintf("%d %d", s, i))
				var err error
				if (s+i)%2 == 0 {
					err = p.c.SendNow(f)
				} else {
					err = p.c.Send(f)
				}
				if err != nil {
					t.Errorf("sender %d frame %d: %v", s, i, err)
					return
				}
			}
		})
	}
	next := make([]int, senders)
	for range senders * each {
		_ = p.client.SetReadDeadline(time.Now().Add(guard))
		_, m, err := p.client.ReadMessage()
		if err != nil {
			t.Fatalf("after %v frames: %v", next, err)
		}
		var s, i int
		if _, err := fmt.Sscanf(string(m), "%d %d", &s, &i); err != nil {
			t.Fatalf("frame %q: %v", m, err)
		}
		if i != next[s] {
			t.Fatalf("sender %d: frame %d arrived when %d was due", s, i, next[s])
		}
		next[s]++
	}
	wg.Wait()
}

// A close flushes what was sent before it, SendNow's frames and queued
// ones alike, then says why; nothing can be sent after it.
func TestCloseFlushesAndSaysWhy(t *testing.T) {
	p := newPair(t, 0)
	for i := range 20 {
		send := p.c.Send
		if i%3 == 0 {
			send = p.c.SendNow
		}
		if err := send([]byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	p.c.CloseWith(websocket.ClosePolicyViolation, "bye")
	for i := range 20 {
		_ = p.client.SetReadDeadline(time.Now().Add(guard))
		_, m, err := p.client.ReadMessage()
		if err != nil || string(m) != fmt.Sprint(i) {
			t.Fatalf("frame %d: %q, %v", i, m, err)
		}
	}
	_, _, err := p.client.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.ClosePolicyViolation || ce.Text != "bye" {
		t.Fatalf("after the frames: %v, want close 1008 bye", err)
	}
	<-p.done
	if err := p.c.SendNow([]byte("late")); !errors.Is(err, wsconn.ErrClosed) {
		t.Fatalf("SendNow after close: %v", err)
	}
	if err := p.c.Send([]byte("late")); !errors.Is(err, wsconn.ErrClosed) {
		t.Fatalf("Send after close: %v", err)
	}
}

// A peer that stops reading: SendNow writes until the socket's buffers are
// full, then blocks its caller no longer than the write timeout, fails
// with ErrClosed and closes the link; Send then fails at once, and the
// writer returns. (Offers SendNow queues behind another writer do not
// count against the frame bound: a peer that reads nothing is cut off by
// the write timeout, as here.)
func TestSendNowToAPeerThatStoppedReading(t *testing.T) {
	p := newPair(t, 300*time.Millisecond)
	big := []byte(strings.Repeat("x", 256<<10))
	var err error
	sent := 0
	for sent < 4096 && err == nil { // 1 GiB would be far past any socket buffer
		err = p.c.SendNow(big)
		if err == nil {
			sent++
		}
	}
	if e := p.c.Send([]byte("small")); !errors.Is(e, wsconn.ErrClosed) {
		t.Fatalf("Send after the cut-off: %v", e)
	}
	if !errors.Is(err, wsconn.ErrClosed) {
		t.Fatalf("after %d frames of 256 KiB to a peer that reads nothing: %v, want ErrClosed", sent, err)
	}
	select {
	case <-p.c.Closed():
	default:
		t.Fatal("the link is not closed after its write failed")
	}
	select {
	case <-p.done:
	case <-time.After(guard):
		t.Fatal("the writer did not return")
	}
	// Its owner's log says why the link ended, not only that it did.
	if why := p.c.Reason(); !strings.Contains(why, "write failed") || !strings.Contains(why, "timeout") {
		t.Fatalf("the cut-off link's reason %q names no failed write and its cause", why)
	}
	t.Logf("%d frames of 256 KiB were written before the socket was full", sent)
}

// guard bounds every wait: a hang detector, never a timing assertion.
const guard = 30 * time.Second

// oneConn is a listener that hands out one connection, then waits.
type oneConn struct {
	c    chan net.Conn
	done chan struct{}
}

func (l *oneConn) Accept() (net.Conn, error) {
	select {
	case c := <-l.c:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}
func (l *oneConn) Close() error   { close(l.done); return nil }
func (l *oneConn) Addr() net.Addr { return &net.TCPAddr{} }

// A close while a SendNow caller is stuck writing to a peer that stopped
// reading frees the caller at once, whatever the write timeout: the link's
// owner (a lane, a stopping leader) is not held by a dead peer. The link
// is a synchronous pipe, so the write is stuck from its first byte.
func TestCloseFreesASendNowStuckOnAStalledPeer(t *testing.T) {
	srvEnd, cliEnd := net.Pipe()
	conns := make(chan *websocket.Conn, 1)
	ln := &oneConn{c: make(chan net.Conn, 1), done: make(chan struct{})}
	ln.c <- srvEnd
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			t.Error(err)
			return
		}
		conns <- ws
	})}
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close(); <-served }()
	dialer := websocket.Dialer{NetDial: func(string, string) (net.Conn, error) { return cliEnd, nil }}
	client, _, err := dialer.Dial("ws://pipe/", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c := wsconn.New(<-conns, "peer is not reading")
	c.WriteTimeout = time.Hour // only the close can end the write
	done := make(chan struct{})
	go c.Writer(done)

	sent := make(chan error, 1)
	go func() { sent <- c.SendNow([]byte("a frame the peer never reads")) }()
	// The first byte read proves the write has begun and holds the turn.
	if _, err := io.ReadFull(cliEnd, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	c.Close("stopping")
	select {
	case err := <-sent:
		if !errors.Is(err, wsconn.ErrClosed) {
			t.Fatalf("the stuck SendNow returned %v, want ErrClosed", err)
		}
	case <-time.After(guard):
		t.Fatal("the close left the SendNow caller stuck")
	}
	select {
	case <-done:
	case <-time.After(guard):
		t.Fatal("the writer did not return")
	}
}
