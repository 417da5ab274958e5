package kyok_test

import (
	"fmt"
	"strings"
	"testing"
)

// The leader relaying a completion hands over (or steps down) mid-answer:
// it closes every /ws/kyok link itself, so the LLM provider did nothing
// wrong. The caller is told funduq's failure — 503 relay_unavailable
// before the door committed to a status, the relay-lost error on a stream
// already begun — never 502 llm_failed "the LLM provider's
// link closed", and the LLM provider's failed counter does not move
// (design.md §KYOK: a node that goes away while relaying is funduq's
// failure, never the LLM provider's).
func TestHandoverMidAnswerIsNotBlamedOnTheLLM(t *testing.T) {
	for i, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			e := newEnv(t, 0)
			b := e.H.Peer("node-b")
			a := e.connectAgent(0x11, "translator")
			l, _, res := e.midAnswer(t, a, byte(0x70+i), stream)

			e.H.Shutdown() // the leader stops leading: its links close, its writes end
			r := wait(t, res)
			if !stream {
				got, _ := errorCode(t, r.body)
				if r.code != 503 || got != "relay_unavailable" || strings.Contains(string(r.body), "LLM provider") {
					t.Fatalf("%d %s, want 503 relay_unavailable not blaming the LLM provider", r.code, r.body)
				}
			} else {
				ev := sseEvents(r.body)
				if r.code != 200 || len(ev) != 2 || !strings.Contains(ev[0], `"content":"part"`) ||
					!strings.Contains(ev[1], "broker node") || strings.Contains(ev[1], "LLM provider") {
					t.Fatalf("%d %q", r.code, ev)
				}
			}
			// The old leader has stopped (Shutdown waited for it): whatever
			// it counted is stored.
			if q := b.Quality(l.key); q.Failed != 0 || q.Completions != 0 || q.Refused != 0 {
				t.Fatalf("the LLM provider was counted for funduq's handover: %+v", q)
			}
		})
	}
}
