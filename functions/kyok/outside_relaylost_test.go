package kyok_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/kyok"
	kyokdoor "github.com/funduq/funduq-go/functions/kyok"
)

// The broker node relaying a completion dies (it takes the request up,
// perhaps relays a chunk, then writes nothing more — not even a
// keep-alive). The door is then talking to nobody: before it has
// committed to a status it answers 503 relay_unavailable with
// Retry-After (the caller may retry; a new leader serves new calls), not
// 502 llm_failed blaming an LLM provider that did nothing wrong; a stream
// already begun ends with the relay-lost error and no [DONE]. The dying
// relay is played here over the door↔leader Redis protocol (core/kyok),
// on a prefix no real relay reads.
func TestOutsideRelayLostIsNotBlamedOnTheLLM(t *testing.T) {
	e := newEnv(t, 0)
	l := e.rawLLM(0x5a, "gpt-4") // served in the durable roster
	a := e.connectAgent(0x11, "translator")
	_, _, token := e.startRun(a, kyok.Ref{ProviderKey: l.key, Name: "gpt-4"}, "")
	prefix := fmt.Sprintf("%sdead-relay-%d:", e.H.Prefix, time.Now().UnixNano())
	door, err := kyokdoor.New(kyokdoor.Options{Store: e.H.Store, Redis: e.rdb, Prefix: prefix,
		TokenSecret: []byte(secret), AckTimeout: 3 * time.Second, RelaySilence: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ds := httptest.NewServer(door)
	defer ds.Close()

	last := "0-0"
	dyingRelay := func(chunks int) {
		res, err := e.rdb.XRead(t.Context(), &redis.XReadArgs{Streams: []string{kyok.RequestStream(prefix), last}, Count: 1, Block: guard}).Result()
		if err != nil {
			t.Error(err)
			return
		}
		m := res[0].Messages[0]
		last = m.ID
		var req kyok.Request
		_ = json.Unmarshal([]byte(m.Values[kyok.FieldRequest].(string)), &req)
		replies := []kyok.Reply{{Kind: kyok.ReplyAccepted}}
		for i := 0; i < chunks; i++ {
			replies = append(replies, kyok.Reply{Kind: kyok.ReplyChunk, Data: json.RawMessage(chunkData("partial"))})
		}
		for _, rep := range replies {
			b, _ := json.Marshal(rep)
			if err := e.rdb.XAdd(t.Context(), &redis.XAddArgs{Stream: req.ReplyKey, Values: []any{kyok.FieldReply, string(b)}}).Err(); err != nil {
				t.Error(err)
			}
		}
	}
	call := func(body string) (int, http.Header, []byte) {
		ts := time.Now().Unix()
		req, _ := http.NewRequest(http.MethodPost, ds.URL+kyokdoor.Path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set(kyokdoor.HeaderTimestamp, strconv.FormatInt(ts, 10))
		req.Header.Set(kyokdoor.HeaderSignature, a.signer.Sign(identity.KyokCallPayload(token, ts, []byte(body))))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, b
	}
	for _, x := range []struct {
		name   string
		body   string
		chunks int
	}{
		{"collapsed, before any chunk", plainBody, 0},
		{"collapsed, mid-answer", plainBody, 1},
		{"streamed, before any chunk", streamBody, 0},
	} {
		t.Run(x.name, func(t *testing.T) {
			go dyingRelay(x.chunks)
			code, h, b := call(x.body)
			got, _ := errorCode(t, b)
			if code != 503 || got != "relay_unavailable" || h.Get("Retry-After") == "" || strings.Contains(string(b), "LLM provider") {
				t.Fatalf("%d %s (Retry-After %q), want 503 relay_unavailable not blaming the LLM provider", code, b, h.Get("Retry-After"))
			}
		})
	}
	t.Run("streamed, mid-answer", func(t *testing.T) {
		go dyingRelay(1)
		code, _, b := call(streamBody)
		ev := sseEvents(b)
		if code != 200 || len(ev) != 2 || !strings.Contains(ev[0], "partial") || !strings.Contains(ev[1], "broker node") {
			t.Fatalf("%d %q", code, ev)
		}
	})
}
