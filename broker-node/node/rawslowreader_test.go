package node_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/funduq/funduq-go/broker-node/node"
	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/wire"
)

// slowConn reads at a modest, steady rate (16 KiB a millisecond at most):
// a provider on a slower network than the leader's PostgreSQL, reading
// everything it is sent.
type slowConn struct{ net.Conn }

func (c slowConn) Read(b []byte) (int, error) {
	time.Sleep(time.Millisecond)
	if len(b) > 16<<10 {
		b = b[:16<<10]
	}
	return c.Conn.Read(b)
}

// A provider whose runs each ask for their long thread at once (our SDK
// bounds no query; every handler may ask), and which reads everything
// steadily, is never cut off for it: the answers' byte bound is for a peer
// that asks and does not read. The link's eight query slots bound the
// answers being read from PostgreSQL, not the answers waiting for the
// writer, so answers read faster than the network carries them passed the
// bound (9 × the frame limit) and the honest provider was cut off as "not
// reading its link", its queries unanswered.
func TestRawSlowReaderOfManyLongThreadsIsNotCutOff(t *testing.T) {
	// Not the time limits, which are not what this is about: on a loaded
	// machine (under -race, beside other packages' tests) this reader took
	// in ~1.4 MB/s, so a 7 MiB answer's write passed its 10 s and the link
	// was cut for that, and the reads of 7 MiB at once passed the queries'
	// 10 s ("could not read the thread right now").
	h := nodetest.StartWith(t, nil, func(o *node.Options) {
		o.QueryTimeout, o.LinkWriteTimeout = 5*time.Minute, 5*time.Minute
	})
	d := &websocket.Dialer{NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		return slowConn{c}, err
	}}
	p := rawDial(t, h, 0x74, d)
	p.register("echo")
	runID, thread := h.Door(p.key, "echo", "", "hi")
	// The thread grows to 7 MiB of messages, under one answer's limit.
	if _, err := h.DB().Exec(context.Background(), `INSERT INTO thread_messages (thread_id, run_id, message_id, message, origin)
		SELECT $1, $2, 'big' || g, json_build_object('id', 'big' || g, 'role', 'user', 'content', repeat('x', 1000000)), 'caller'
		FROM generate_series(1, 7) g`, thread, runID); err != nil {
		t.Fatal(err)
	}
	const queries = 16 // 112 MiB of answers
	for i := 0; i < queries; i++ {
		p.text(fmt.Sprintf(`{"type":"query","queryId":"q%d","method":"thread_messages","params":{"threadId":%q}}`, i, thread))
	}
	answered := 0
	for answered < queries {
		f := p.next()
		// Read as bytes, not decoded: decoding 7 MiB a frame under -race
		// kept this reader from its socket long enough for the leader's
		// write of the next answer to pass its time limit.
		head := f.data[:min(len(f.data), 64)]
		if !bytes.Contains(head, []byte(`"type":"`+wire.TypeQueryResult+`"`)) {
			continue // the run's offer
		}
		if n := bytes.Count(f.data, []byte(`"role"`)); n != 8 || bytes.Contains(f.data, []byte(`"error"`)) {
			t.Fatalf("answer %d: %d messages in %.200s; want the thread's 8", answered+1, n, f.data)
		}
		answered++
	}
}
