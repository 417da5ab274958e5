package kyok_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/kyok"
)

// An LLM provider rolling over to a new process: the new link of the key
// registers the model (taking it over), then the old one, shutting down,
// deletes it. The delete is refused on the old link — it no longer serves
// the model, the new one does, as deleteAgent on the agent link — and the
// new link goes on answering calls; it is never left serving an offering
// the roster says is gone.
func TestOutsideDeleteFromAReplacedLinkLeavesTheNewOneServing(t *testing.T) {
	e := newEnv(t, 0)
	old := e.rawLLM(0x5c, "gpt-4")
	cur := e.rawLLM(0x5c, "gpt-4")
	old.raw(`{"type":"deleteModel","name":"gpt-4"}`)
	select {
	case m := <-old.frames:
		if m["type"] != "error" || m["name"] != "gpt-4" || !strings.Contains(fmt.Sprint(m["message"]), "another link") {
			t.Errorf("deleteModel on the replaced link: answered %v", m)
		}
	case <-time.After(guard):
		t.Fatal("deleteModel on the replaced link not answered")
	}
	a := e.connectAgent(0x11, "translator")
	_, _, token := e.startRun(a, kyok.Ref{ProviderKey: cur.key, Name: "gpt-4"}, "")
	res := e.asyncCall(a, token, plainBody)
	id := cur.requestID()
	cur.raw(rawChunk(id, chunkData("from the new process")))
	cur.raw(`{"type":"done","requestId":"` + id + `"}`)
	if r := wait(t, res); r.code != 200 || !strings.Contains(string(r.body), "from the new process") {
		t.Fatalf("%d %s", r.code, r.body)
	}
}
