package wsconn_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// readN reads n frames from the peer's side, failing on anything else.
func readN(t *testing.T, p *pair, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		_ = p.client.SetReadDeadline(time.Now().Add(guard))
		if _, _, err := p.client.ReadMessage(); err != nil {
			t.Fatalf("frame %d of %d: %v; want every frame sent, the link open", i+1, n, err)
		}
	}
}

// The byte bound is on answers, what the peer asked for: offers and
// cancels (Send, SendNow) are funduq's own doing. A burst of offers to a
// provider coming back (no declared limit, many runs queued, each up to a
// door's body) waiting for the writer when that provider's first query is
// answered was counted against the answer, and the honest provider — it
// had not yet had the time to read them — was cut off as "not reading",
// its offers dropped; reconnecting brought the same burst back.
func TestOffersDoNotCountAgainstAnAnswer(t *testing.T) {
	p := newPair(t, 0)
	offer := []byte(strings.Repeat("o", 1<<20))
	const offers = 128 // well past the 64 MiB bound, far past what the sockets hold
	for i := 0; i < offers; i++ {
		if err := p.c.Send(offer); err != nil {
			t.Fatalf("offer %d: %v", i+1, err)
		}
	}
	if err := p.c.SendAnswer([]byte(`{"type":"queryResult","queryId":"q1","result":[]}`)); err != nil {
		t.Fatalf("a small answer after %d MiB of offers the peer has not read yet: %v (cut off: %v); want it taken",
			offers, err, p.c.CutOff())
	}
	readN(t, p, offers+1)
}

// What the bound counts is given back as frames are written: a link that
// answers many times, each answer read, stays up however many bytes it
// has answered in all (here 20 rounds of 32 MiB, ten times the bound),
// with offers sent and written in between by SendNow and the writer.
func TestAnswerBytesAreGivenBackAsWritten(t *testing.T) {
	p := newPair(t, 0)
	answer := []byte(strings.Repeat("a", 1<<20))
	offer := []byte(strings.Repeat("o", 4<<10))
	for round := 0; round < 20; round++ {
		// The peer reads nothing until the round's answers are queued.
		for i := 0; i < 32; i++ {
			if err := p.c.SendAnswer(answer); err != nil {
				t.Fatalf("round %d, answer %d: %v (cut off: %v); want every answer taken", round, i+1, err, p.c.CutOff())
			}
		}
		readN(t, p, 32)
		if err := p.c.SendNow(offer); err != nil {
			t.Fatalf("round %d, offer: %v", round, err)
		}
		readN(t, p, 1)
	}
}

// Answers (waiting for room), offers and a close from many goroutines at once, a reading
// peer: under -race, nothing is torn, the link ends as closed (not cut
// off), and what arrived before the close arrived whole.
func TestAnswersOffersAndCloseRace(t *testing.T) {
	for run := 0; run < 5; run++ {
		p := newPair(t, 0)
		p.c.MaxQueued = 256 << 10 // answers wait for room often
		frame := []byte(strings.Repeat("r", 64<<10))
		readErr := make(chan error, 1)
		go func() {
			for {
				_ = p.client.SetReadDeadline(time.Now().Add(guard))
				_, b, err := p.client.ReadMessage()
				if err != nil {
					readErr <- err
					return
				}
				if len(b) != len(frame) {
					readErr <- errors.New("a torn frame")
					return
				}
			}
		}()
		var wg sync.WaitGroup
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				for i := 0; i < 100; i++ {
					if g == 0 && i == run*20 {
						p.c.Close("going away") // mid-stream, a different moment each run
					}
					switch (g + i) % 3 {
					case 0:
						_ = p.c.SendAnswerWhenRoom(frame)
					case 1:
						_ = p.c.SendNow(frame)
					default:
						_ = p.c.Send(frame)
					}
				}
			}(g)
		}
		wg.Wait()
		p.c.Close("going away") // for a run whose close came last
		err := <-readErr
		var ce *websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != websocket.CloseGoingAway {
			t.Fatalf("run %d: the peer read %v; want the close 1001 (cut off: %v)", run, err, p.c.CutOff())
		}
	}
}

// An answer that finds no room under the bound waits for the writer
// rather than cutting the link off: a peer that asked for more than its
// network carries at once, and reads it all, gets every answer.
func TestAnswersWaitForRoom(t *testing.T) {
	p := newPair(t, 0)
	p.c.MaxQueued = 16 << 20
	answer := []byte(strings.Repeat("a", 4<<20))
	const answers = 24 // 96 MiB, six times the bound
	errs := make(chan error, answers)
	for i := 0; i < answers; i++ {
		go func() { errs <- p.c.SendAnswerWhenRoom(answer) }()
	}
	readN(t, p, answers) // the peer reads only now, all of them
	for i := 0; i < answers; i++ {
		if err := <-errs; err != nil {
			t.Fatalf("an answer: %v (cut off: %v); want every answer sent", err, p.c.CutOff())
		}
	}
}

// A peer that reads nothing is still cut off, by the write timeout, and
// every answer waiting for room returns then: none is held for ever.
func TestAnswersWaitingEndWhenTheLinkIsCutOff(t *testing.T) {
	p := newPair(t, 200*time.Millisecond)
	p.c.MaxQueued = 16 << 20
	answer := []byte(strings.Repeat("a", 4<<20))
	var wg sync.WaitGroup
	for i := 0; i < 24; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); _ = p.c.SendAnswerWhenRoom(answer) }()
	}
	wg.Wait()
	if !p.c.CutOff() {
		t.Fatal("every answer returned, the link not cut off; want the peer that reads nothing cut off")
	}
}

// A link cut off while offers, answers waiting for room and inline writes
// race it: under -race, every sender returns (none waits for room on a
// closed link, none holds the writing turn), and the peer's read ends.
func TestCutOffRacesEverySender(t *testing.T) {
	p := newPair(t, 0)
	p.c.MaxQueued = 64 << 10
	frame := []byte(strings.Repeat("c", 4<<10)) // 32 MiB sent in all, past what the sockets hold
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				var err error
				switch g % 4 {
				case 0:
					err = p.c.SendAnswerWhenRoom(frame)
				case 1:
					err = p.c.SendNow(frame)
				default:
					err = p.c.Send(frame) // 8 000 in all: past the count
				}
				if err != nil {
					return
				}
			}
		}(g)
	}
	wg.Wait()
	if !p.c.CutOff() {
		t.Fatal("every sender returned, the link not cut off; want the peer that reads nothing cut off")
	}
	for {
		_ = p.client.SetReadDeadline(time.Now().Add(guard))
		if _, _, err := p.client.ReadMessage(); err != nil {
			var ne interface{ Timeout() bool }
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("the peer's read: %v; want the link's end", err)
			}
			return
		}
	}
}
