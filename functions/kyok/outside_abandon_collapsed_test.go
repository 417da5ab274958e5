package kyok_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/kyok"
	kyokdoor "github.com/funduq/funduq-go/functions/kyok"
)

// A non-streamed call whose agent goes away before the answer is
// collapsed — before any chunk, or after one — is counted as none of
// completions, refused or failed, however the LLM provider then ends it
// (spec broker.md §9.6), as an abandoned stream is: nobody got the answer.
func TestOutsideAbandonedCollapsedCallIsNotCounted(t *testing.T) {
	e := newEnv(t, 0)
	ds, returned := e.watchedDoor(t)
	a := e.connectAgent(0x11, "translator")
	for i, end := range []string{
		`{"type":"done","requestId":"%s"}`,
		`{"type":"error","requestId":"%s","message":"upstream 500"}`,
		`{"type":"error","requestId":"%s","message":"no","refusal":{"code":"budget"}}`,
	} {
		for j, before := range []bool{false, true} {
			l := e.rawLLM(byte(0x70+2*i+j), "gpt-4")
			_, _, token := e.startRun(a, kyok.Ref{ProviderKey: l.key, Name: "gpt-4"}, "")
			ts := time.Now().Unix()
			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ds.URL+kyokdoor.Path, strings.NewReader(plainBody))
			req.Header.Set("Authorization", "Bearer "+token)
			req.Header.Set(kyokdoor.HeaderTimestamp, strconv.FormatInt(ts, 10))
			req.Header.Set(kyokdoor.HeaderSignature, a.signer.Sign(identity.KyokCallPayload(token, ts, []byte(plainBody))))
			done := make(chan struct{})
			go func() {
				defer close(done)
				resp, err := http.DefaultClient.Do(req)
				if err == nil {
					resp.Body.Close()
				}
			}()
			id := l.requestID()
			if !before {
				l.raw(rawChunk(id, chunkData("first")))
			}
			// The agent goes away; the door sees it go.
			cancel()
			<-done
			select {
			case <-returned:
			case <-time.After(guard):
				t.Fatal("the door did not notice its caller leave")
			}
			l.raw(rawChunk(id, chunkData("unread")))
			l.raw(strings.Replace(end, "%s", id, 1))
			// The barrier: a frame after the end is answered once the end
			// has been handled (and counted, if it is).
			l.raw(`{"type":"done","requestId":"` + id + `"}`)
			l.next("error")
			if q := e.H.Quality(l.key); q.Completions != 0 || q.Refused != 0 || q.Failed != 0 {
				t.Errorf("%s before=%v: an abandoned collapsed call counted %+v", end, before, q)
			}
		}
	}
}
