package kyok_test

import (
	"context"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/core/kyok"
)

// A completion's request — the calling agent's prompt and the caller's
// KYOK context, which funduq otherwise keeps only sealed (design.md §KYOK)
// — travels to the leader through Redis, and is gone from Redis once the
// call has been answered: an operator reading Redis afterwards finds
// neither, for a call that was answered and for one the LLM provider
// failed.
func TestOutsideAnsweredRequestLeavesNothingInRedis(t *testing.T) {
	e := newEnv(t, 0)
	l := e.rawLLM(0x5a, "gpt-4")
	a := e.connectAgent(0x11, "translator")
	ref := kyok.Ref{ProviderKey: l.key, Name: "gpt-4"}
	_, _, token := e.startRun(a, ref, `{"voucher":"v-secret-42"}`)
	body := `{"model":"gpt-4","messages":[{"role":"user","content":"my private prompt"}]}`
	res := e.asyncCall(a, token, body)
	id := l.requestID()
	l.raw(rawChunk(id, chunkData("answer")))
	l.raw(`{"type":"done","requestId":"` + id + `"}`)
	if r := wait(t, res); r.code != 200 || !strings.Contains(string(r.body), "answer") {
		t.Fatalf("%d %s", r.code, r.body)
	}
	leftover := func() string {
		msgs, err := e.rdb.XRange(context.Background(), kyok.RequestStream(e.H.Prefix), "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range msgs {
			s, _ := m.Values[kyok.FieldRequest].(string)
			out = append(out, s)
		}
		return strings.Join(out, "\n")
	}
	eventually(t, "the answered request gone from Redis", func() bool { return leftover() == "" })

	// Failed by the LLM provider before its answer began.
	res = e.asyncCall(a, token, body)
	id = l.requestID()
	l.raw(`{"type":"error","requestId":"` + id + `","message":"no"}`)
	if r := wait(t, res); r.code != 502 {
		t.Fatalf("%d %s", r.code, r.body)
	}
	eventually(t, "the failed request gone from Redis", func() bool { return leftover() == "" })
}
