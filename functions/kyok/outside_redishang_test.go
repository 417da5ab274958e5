package kyok_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/kyok"
	"github.com/funduq/funduq-go/core/redistest"
	"github.com/funduq/funduq-go/functions/door"
	kyokdoor "github.com/funduq/funduq-go/functions/kyok"
)

// hangEnv is a KYOK door whose Redis sits behind a redisProxy, on a
// client built as a deployed door builds it (door.Connect) from a Redis
// URL with read_timeout=0 — go-redis then waits for ever on a read no
// context deadline bounds — and a run the door serves calls for. The
// relay is played over the door↔leader Redis protocol (core/kyok) on a
// prefix no real relay reads, on a client of its own, straight to Redis.
type hangEnv struct {
	*env
	px     *redisProxy
	prefix string
	door   http.Handler
	a      *agent
	token  string
	last   string
}

func newHangEnv(t *testing.T) *hangEnv {
	t.Helper()
	e := newEnv(t, 0)
	l := e.rawLLM(0x5b, "gpt-4")
	a := e.connectAgent(0x12, "translator")
	_, _, token := e.startRun(a, kyok.Ref{ProviderKey: l.key, Name: "gpt-4"}, "")
	px := newRedisProxy(t, mustAddr(t))
	u, _ := url.Parse(redistest.URL())
	st := e.H.Cfg.Storage
	st.RedisURL = "redis://" + px.addr() + u.Path + "?read_timeout=0"
	deps, err := door.Connect(config.Door{Storage: st, Identity: e.H.Cfg.Identity}, door.ConnectOptions{MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("%shung-redis-%d:", e.H.Prefix, time.Now().UnixNano())
	d, err := kyokdoor.New(kyokdoor.Options{Store: deps.Store, Redis: deps.Redis, Prefix: prefix,
		TokenSecret: []byte(secret), AckTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// Runs before the proxy's release (cleanups run last first): a
	// handler stuck on the hung Redis is let go first.
	t.Cleanup(deps.Close)
	return &hangEnv{env: e, px: px, prefix: prefix, door: d, a: a, token: token, last: "0-0"}
}

func mustAddr(t *testing.T) string {
	t.Helper()
	opt, err := redis.ParseURL(redistest.URL())
	if err != nil {
		t.Fatal(err)
	}
	return opt.Addr
}

// relay takes the next request up and writes replies to its reply
// stream.
func (h *hangEnv) relay(replies ...kyok.Reply) {
	res, err := h.rdb.XRead(h.t.Context(), &redis.XReadArgs{Streams: []string{kyok.RequestStream(h.prefix), h.last}, Count: 1, Block: guard}).Result()
	if err != nil {
		h.t.Error(err)
		return
	}
	m := res[0].Messages[0]
	h.last = m.ID
	var req kyok.Request
	_ = json.Unmarshal([]byte(m.Values[kyok.FieldRequest].(string)), &req)
	for _, rep := range replies {
		b, _ := json.Marshal(rep)
		if err := h.rdb.XAdd(h.t.Context(), &redis.XAddArgs{Stream: req.ReplyKey, Values: []any{kyok.FieldReply, string(b)}}).Err(); err != nil {
			h.t.Error(err)
		}
	}
}

// request is a signed call of body to the door at srv.
func (h *hangEnv) request(ctx context.Context, srv, body string) *http.Request {
	ts := time.Now().Unix()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv+kyokdoor.Path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+h.token)
	req.Header.Set(kyokdoor.HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(kyokdoor.HeaderSignature, h.a.signer.Sign(identity.KyokCallPayload(h.token, ts, []byte(body))))
	return req
}

// call answers body within guard (a hang detector).
func (h *hangEnv) call(t *testing.T, body string) (int, http.Header, []byte) {
	t.Helper()
	srv := httptest.NewServer(h.door)
	// Close waits for the handler: a handler stuck on the hung Redis
	// (before the fix) is let go first.
	defer func() { h.px.release(); srv.Close() }()
	ctx, cancel := context.WithTimeout(t.Context(), guard)
	defer cancel()
	resp, err := http.DefaultClient.Do(h.request(ctx, srv.URL, body))
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	return resp.StatusCode, resp.Header, b
}

// A door whose Redis hangs while it waits on a completion's replies
// answers the trouble as its storage's (design.md §Failure, the KYOK
// door): 503 unavailable with Retry-After before it committed to a
// status, an error naming funduq's storage on a stream already begun —
// never 502 llm_failed blaming an LLM provider that did nothing wrong.
// Before, a reply read waited as long as the Redis client let it (its
// block + 10 s), then the failure was reported as the provider's silence.
func TestOutsideRedisHangMidCallIsNotBlamedOnTheLLM(t *testing.T) {
	for _, x := range []struct {
		name, body, hangAfter string
		chunks                int
	}{
		{"collapsed, once taken up", plainBody, `"accepted"`, 0},
		{"collapsed, mid-answer", plainBody, "partial", 1},
		{"streamed, once taken up", streamBody, `"accepted"`, 0},
	} {
		t.Run(x.name, func(t *testing.T) {
			h := newHangEnv(t)
			h.px.hangAfter(x.hangAfter)
			replies := []kyok.Reply{{Kind: kyok.ReplyAccepted}}
			for range x.chunks {
				replies = append(replies, kyok.Reply{Kind: kyok.ReplyChunk, Data: json.RawMessage(chunkData("partial"))})
			}
			go h.relay(replies...)
			code, hdr, b := h.call(t, x.body)
			got, _ := errorCode(t, b)
			if code != 503 || got != "unavailable" || hdr.Get("Retry-After") == "" || strings.Contains(string(b), "LLM provider") {
				t.Fatalf("%d %s (Retry-After %q), want 503 unavailable not blaming the LLM provider", code, b, hdr.Get("Retry-After"))
			}
		})
	}
	t.Run("streamed, mid-answer", func(t *testing.T) {
		h := newHangEnv(t)
		h.px.hangAfter("partial")
		go h.relay(kyok.Reply{Kind: kyok.ReplyAccepted}, kyok.Reply{Kind: kyok.ReplyChunk, Data: json.RawMessage(chunkData("partial"))})
		code, _, b := h.call(t, streamBody)
		ev := sseEvents(b)
		if code != 200 || len(ev) != 2 || !strings.Contains(ev[0], "partial") || !strings.Contains(ev[1], "storage") ||
			strings.Contains(ev[1], "LLM provider") {
			t.Fatalf("%d %q, want the chunk then an error naming funduq's storage", code, ev)
		}
	})
}

// A door whose Redis hangs from the start (connections accepted, never
// answered) answers a call 503 unavailable with Retry-After by its own
// storage bound (D13: fail fast), whatever timeouts its Redis URL gives
// the client — here none — and a call whose caller left ends. Before,
// the door's write of the request waited as long as the client let it:
// with read_timeout=0 for ever, the caller gone or not.
func TestOutsideCallAnsweredWhileRedisHangs(t *testing.T) {
	t.Run("answered", func(t *testing.T) {
		h := newHangEnv(t)
		h.px.hang()
		code, hdr, b := h.call(t, plainBody)
		got, _ := errorCode(t, b)
		if code != 503 || got != "unavailable" || hdr.Get("Retry-After") == "" {
			t.Fatalf("%d %s (Retry-After %q), want 503 unavailable", code, b, hdr.Get("Retry-After"))
		}
	})
	t.Run("caller leaves", func(t *testing.T) {
		h := newHangEnv(t)
		h.px.hang()
		returned := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer close(returned)
			h.door.ServeHTTP(w, r)
		}))
		defer func() { h.px.release(); srv.Close() }()
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go func() {
			// The caller leaves once the door has reached the hung Redis.
			select {
			case <-h.px.reached:
				cancel()
			case <-ctx.Done():
			}
		}()
		resp, err := http.DefaultClient.Do(h.request(ctx, srv.URL, streamBody))
		if err == nil {
			resp.Body.Close()
		}
		select {
		case <-returned:
		case <-time.After(guard):
			t.Fatalf("the door's handler had not returned %s after its caller left", guard)
		}
	})
}
