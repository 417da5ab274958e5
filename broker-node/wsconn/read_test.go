package wsconn_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/broker-node/wsconn"
)

// ReadFrame hands each frame over whole, whatever the frames before it
// were (buffers are shared and reused once released), and a frame over the
// link's read limit fails the read.
func TestReadFrameReusesBuffersSafely(t *testing.T) {
	p := newPair(t, 0)
	p.c.WS.SetReadLimit(256 << 10)
	sent := []string{strings.Repeat("a", 100<<10), "b", strings.Repeat("c", 3000), "", "d d d"}
	for _, s := range sent {
		if err := p.client.WriteMessage(websocket.TextMessage, []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	var kept [][]byte
	for i, want := range sent {
		kind, buf, err := wsconn.ReadFrame(p.c.WS)
		if err != nil || kind != websocket.TextMessage {
			t.Fatalf("frame %d: kind %d, %v", i, kind, err)
		}
		if buf.String() != want {
			t.Fatalf("frame %d: %d bytes, want %d", i, buf.Len(), len(want))
		}
		kept = append(kept, bytes.Clone(buf.Bytes()))
		wsconn.Release(buf)
	}
	for i, k := range kept {
		if string(k) != sent[i] {
			t.Fatalf("frame %d changed after later reads", i)
		}
	}
	if err := p.client.WriteMessage(websocket.TextMessage, bytes.Repeat([]byte("x"), 300<<10)); err != nil {
		t.Fatal(err)
	}
	if _, buf, err := wsconn.ReadFrame(p.c.WS); !errors.Is(err, websocket.ErrReadLimit) || buf != nil {
		t.Fatalf("a frame over the limit: %v (buffer %v)", err, buf != nil)
	}
}
