package wsconn_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/broker-node/wsconn"
)

// What a link holds for a peer that stops reading is bounded in bytes, not
// only in frames: a provider asking for its thread again and again without
// reading the answers (each up to FUNDUQ_MAX_FRAME_BYTES, 8 MiB) made the
// leader hold up to 4 096 of them — 32 GiB — until the write timeout or
// the frame count cut it off. Now the link is cut off once an answer would
// take what waits for the writer past its byte bound.
func TestQueuedBytesAreBounded(t *testing.T) {
	p := newPair(t, 0) // the default write timeout: only the bound cuts
	mib := []byte(strings.Repeat("x", 1<<20))
	const frames = 1024 // 1 GiB queued, were it not bounded
	var err error
	sent := 0
	for ; sent < frames && err == nil; sent++ {
		err = p.c.SendAnswer(mib)
	}
	if !errors.Is(err, wsconn.ErrClosed) || !p.c.CutOff() {
		t.Fatalf("%d MiB sent to a peer that reads nothing, the link still open (%v); want it cut off", sent, err)
	}
	t.Logf("cut off after %d MiB", sent)
}

// A link cut off because its peer stopped reading goes without its backlog:
// the close frame, saying why, follows what the socket already held, not
// thousands of queued frames, each with a write timeout of its own — a
// peer reading a little every few seconds kept a cut-off link, its writer
// and its backlog for hours.
func TestCutOffLinkDropsItsBacklog(t *testing.T) {
	p := newPair(t, 0)
	frame := []byte(strings.Repeat("y", 16<<10))
	var err error
	sent := 0
	for ; sent < 8192 && err == nil; sent++ {
		err = p.c.Send(frame)
	}
	if !errors.Is(err, wsconn.ErrClosed) {
		t.Fatalf("%d frames to a peer that reads nothing: %v, want the link cut off", sent, err)
	}
	// The peer reads again.
	read := 0
	for {
		_ = p.client.SetReadDeadline(time.Now().Add(guard))
		_, _, err = p.client.ReadMessage()
		if err != nil {
			break
		}
		read++
	}
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.CloseTryAgainLater || ce.Text != "peer is not reading" {
		t.Fatalf("after %d frames: %v, want close 1013 saying why", read, err)
	}
	if read >= sent-1 {
		t.Fatalf("the peer read %d of the %d frames queued before the close; want the backlog dropped", read, sent-1)
	}
	t.Logf("read %d of %d frames, then the close", read, sent-1)
}

// Offers queued behind a write (SendNow while another holds the writing
// turn) are funduq's own, one per run: a burst of them past the frame
// bound to a provider whose network is slower than the lanes does not cut
// it off. Frames the peer's own frames call for (Send) are still bounded.
func TestOffersDoNotCountTowardTheFrameBound(t *testing.T) {
	p := newPair(t, 0)
	// A frame far past any socket buffer holds the writer on the network.
	if err := p.c.Send([]byte(strings.Repeat("z", 64<<20))); err != nil {
		t.Fatal(err)
	}
	offer := []byte(strings.Repeat("o", 1<<10))
	for i := range 6000 {
		if err := p.c.SendNow(offer); err != nil || p.c.CutOff() {
			t.Fatalf("offer %d queued behind a write: %v; want the link open", i+1, err)
		}
	}
	var err error
	sent := 0
	for ; sent < 8192 && err == nil; sent++ {
		err = p.c.Send([]byte("refusal"))
	}
	if !errors.Is(err, wsconn.ErrClosed) || !p.c.CutOff() {
		t.Fatalf("%d frames the peer called for, queued and unread: %v; want the link cut off", sent, err)
	}
}
