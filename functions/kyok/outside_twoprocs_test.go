package kyok_test

import (
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/kyok"
)

// Two processes of one LLM provider's key both register gpt-4; the newer
// link takes it over (design.md §KYOK). When the newer one goes away, the
// older one — still open, and never told it had stopped serving the
// model — serves it again: an offering is online while a live link
// registered it (provider-link.md §1), and a call is not refused
// llm_not_attached while such a link is open.
func TestOutsideOlderLinkServesWhenTheNewerGoes(t *testing.T) {
	e := newEnv(t, 0)
	older := e.rawLLM(0x61, "gpt-4")
	newer := e.rawLLM(0x61, "gpt-4")
	a := e.connectAgent(0x11, "translator")
	_, _, token := e.startRun(a, kyok.Ref{ProviderKey: newer.key, Name: "gpt-4"}, "")

	// The newer link goes away mid-answer; the call it held fails (its
	// teardown has taken it off the key's roster by then).
	res := e.asyncCall(a, token, plainBody)
	newer.requestID()
	_ = newer.ws.UnderlyingConn().Close()
	if r := wait(t, res); r.code != 502 {
		t.Fatalf("the call the newer link held: %d %s", r.code, r.body)
	}

	res = e.asyncCall(a, token, plainBody)
	select {
	case m := <-older.frames:
		id, _ := m["requestId"].(string)
		if m["type"] != "completionRequest" {
			t.Fatalf("older link got %v", m)
		}
		older.raw(rawChunk(id, chunkData("older")))
		older.raw(`{"type":"done","requestId":"` + id + `"}`)
		if r := wait(t, res); r.code != 200 || !strings.Contains(string(r.body), "older") {
			t.Fatalf("%d %s", r.code, r.body)
		}
	case r := <-res:
		t.Fatalf("with the older link open: %d %s", r.code, r.body)
	case <-time.After(guard):
		t.Fatal("the call hung")
	}
}
