package kyok_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/strictjson"
	kyokdoor "github.com/funduq/funduq-go/functions/kyok"
	"github.com/funduq/funduq-go/internal/syncbuf"
)

// A refused call is logged as one JSON object a log reader takes as it
// was written: its message is "kyok call refused", and the refusal's own
// text rides beside it, not under a second "msg" key (which a JSON
// reader resolves to the last one, so the line would read as the
// refusal's text, and a strict reader refuses it).
func TestRefusalLogLineIsOneReadableObject(t *testing.T) {
	e := newEnv(t, 0)
	logs := &syncbuf.Buffer{}
	ds, returned := e.loggedDoor(t, logs)
	req, err := http.NewRequest(http.MethodPost, ds.URL+kyokdoor.Path, strings.NewReader(streamBody))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer not-a-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	select {
	case <-returned:
	case <-time.After(guard):
		t.Fatal("the door did not answer")
	}
	line := strings.TrimSpace(logs.String())
	if resp.StatusCode != http.StatusUnauthorized || strings.Count(line, "\n") != 0 {
		t.Fatalf("got %d, logged %q; want 401 and one line", resp.StatusCode, line)
	}
	if err := strictjson.Check([]byte(line), 0); err != nil {
		t.Errorf("the log line %s: %v", line, err)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatal(err)
	}
	if m["msg"] != "kyok call refused" || m["code"] != "invalid_token" || !strings.Contains(line, "invalid or expired KYOK token") {
		t.Errorf("the log line reads %v, want \"kyok call refused\" with the refusal's code and text", m)
	}
}
