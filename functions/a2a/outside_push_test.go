package a2a_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/functions/a2a"
)

// A send asking for push notifications, which the agent card says this
// door does not offer, is refused -32003 PushNotificationNotSupported and
// writes nothing: taken and ignored, the caller would wait for a webhook
// that never comes. Each version's name for the config is read; a null one
// asks for nothing.
func TestOutsidePushConfigInASendIsRefused(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	hook := map[string]any{"url": "https://example.com/hook"}
	for _, x := range []struct {
		name, version, method, key string
		config                     any
	}{
		{"v0.3 message/send", "", "message/send", "pushNotificationConfig", hook},
		{"v0.3 message/stream", "", "message/stream", "pushNotificationConfig", hook},
		{"v0.3 not an object", "", "message/send", "pushNotificationConfig", 5},
		{"v1.0 SendMessage", "1.0", "SendMessage", "taskPushNotificationConfig", map[string]any{"pushNotificationConfig": hook}},
		{"v1.0 SendStreamingMessage", "1.0", "SendStreamingMessage", "taskPushNotificationConfig", map[string]any{"pushNotificationConfig": hook}},
		{"v1.0 older name", "1.0", "SendMessage", "pushNotification", hook},
	} {
		t.Run(x.name, func(t *testing.T) {
			c := newClient(t, srv, p.Key, "echo", x.version)
			msg := c.message("push-"+x.name, "hi", nil)
			body := c.body(x.method, map[string]any{"message": msg,
				"configuration": map[string]any{"returnImmediately": true, x.key: x.config}})
			resp, cancel := c.post(body, nil)
			defer cancel()
			defer resp.Body.Close()
			if ct := resp.Header.Get("Content-Type"); strings.HasPrefix(ct, "text/event-stream") {
				t.Fatalf("the send opened a stream (%d %s), want -32003", resp.StatusCode, ct)
			}
			var r rpcResp
			if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
				t.Fatal(err)
			}
			if r.Error == nil || r.Error.Code != a2a.CodePushNotificationNotSupported {
				t.Fatalf("got %+v %v, want -32003", r.Error, r.Result)
			}
			if got := count(t, h, "runs"); got != 0 {
				t.Fatalf("%d runs written", got)
			}
		})
	}
	t.Run("null asks for nothing", func(t *testing.T) {
		c := newClient(t, srv, p.Key, "echo", "")
		task := c.send(c.message("push-null", "hi", nil), map[string]any{
			"configuration": map[string]any{"blocking": false, "pushNotificationConfig": nil}})
		if task["id"] == nil {
			t.Fatalf("task %v", task)
		}
	})
}
