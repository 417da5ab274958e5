package kyok_test

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/kyok"
	kyokdoor "github.com/funduq/funduq-go/functions/kyok"
)

// A stream the calling agent abandons part-way is counted as none of
// completions, refused or failed (spec broker.md §9.6), however the LLM
// provider then ends it: the agent never got that answer, and the
// counters describe what LLM providers delivered.
func TestOutsideAbandonedStreamIsNotCounted(t *testing.T) {
	e := newEnv(t, 0)
	ds, returned := e.watchedDoor(t)

	a := e.connectAgent(0x11, "translator")
	for i, end := range []string{
		`{"type":"done","requestId":"%s"}`,
		`{"type":"error","requestId":"%s","message":"upstream 500"}`,
		`{"type":"error","requestId":"%s","message":"no","refusal":{"code":"budget"}}`,
	} {
		l := e.rawLLM(byte(0x70+i), "gpt-4")
		_, _, token := e.startRun(a, kyok.Ref{ProviderKey: l.key, Name: "gpt-4"}, "")
		ts := time.Now().Unix()
		req, _ := http.NewRequest(http.MethodPost, ds.URL+kyokdoor.Path, strings.NewReader(streamBody))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set(kyokdoor.HeaderTimestamp, strconv.FormatInt(ts, 10))
		req.Header.Set(kyokdoor.HeaderSignature, a.signer.Sign(identity.KyokCallPayload(token, ts, []byte(streamBody))))
		respc := make(chan *http.Response, 1)
		go func() {
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
			}
			respc <- resp
		}()
		id := l.requestID()
		l.raw(rawChunk(id, chunkData("first")))
		resp := <-respc
		if resp == nil {
			t.FailNow()
		}
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		if err != nil || !strings.Contains(line, "first") {
			t.Fatalf("first event %q %v", line, err)
		}
		// The agent goes away part-way; the door sees it go.
		resp.Body.Close()
		select {
		case <-returned:
		case <-time.After(guard):
			t.Fatal("the door did not notice its caller leave")
		}
		l.raw(rawChunk(id, chunkData("unread")))
		l.raw(strings.Replace(end, "%s", id, 1))
		// The barrier: a frame after the end is answered once the end has
		// been handled (and counted, if it is).
		l.raw(`{"type":"done","requestId":"` + id + `"}`)
		l.next("error")
		if q := e.H.Quality(l.key); q.Completions != 0 || q.Refused != 0 || q.Failed != 0 {
			t.Errorf("%s: an abandoned stream counted %+v", end, q)
		}
	}
}

// watchedDoor is a KYOK door of the test's own behind a server that says
// on returned each time the door has finished a request: how a test knows
// the door has seen its caller go.
func (e *env) watchedDoor(t *testing.T) (ds *httptest.Server, returned <-chan struct{}) {
	t.Helper()
	door, err := kyokdoor.New(kyokdoor.Options{Store: e.H.Store, Redis: e.rdb, Prefix: e.H.Prefix,
		TokenSecret: []byte(secret), AckTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ret := make(chan struct{}, 8)
	ds = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		door.ServeHTTP(w, r)
		ret <- struct{}{}
	}))
	t.Cleanup(ds.Close)
	return ds, ret
}
