package kyok_test

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/kyok"
)

// The Authorization scheme is matched in any case (RFC 9110 §11.1: "bearer"
// is "Bearer"), so an agent whose HTTP client writes it in lower case is
// served, not told its token is invalid.
func TestOutsideBearerSchemeInAnyCase(t *testing.T) {
	e := newEnv(t, 0)
	l := e.rawLLM(0x5a, "gpt-4")
	a := e.connectAgent(0x11, "translator")
	_, _, token := e.startRun(a, kyok.Ref{ProviderKey: l.key, Name: "gpt-4"}, "")
	priv := rawSeed(0x11)
	for _, scheme := range []string{"bearer", "BEARER"} {
		t.Run(scheme, func(t *testing.T) {
			ts := time.Now().Unix()
			h := sha256.Sum256([]byte(plainBody))
			sig := hex.EncodeToString(ed25519.Sign(priv, []byte("funduq-kyok-call:"+token+":"+strconv.FormatInt(ts, 10)+":"+hex.EncodeToString(h[:]))))
			req, _ := http.NewRequest(http.MethodPost, e.DoorURL+"/kyok/v1/chat/completions", strings.NewReader(plainBody))
			req.Header.Set("Authorization", scheme+" "+token)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Souk-Kyok-Timestamp", strconv.FormatInt(ts, 10))
			req.Header.Set("X-Souk-Kyok-Signature", sig)
			res := make(chan result, 1)
			go func() {
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					res <- result{0, []byte(err.Error())}
					return
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				res <- result{resp.StatusCode, b}
			}()
			select {
			case r := <-res:
				t.Fatalf("answered before the LLM provider was asked: %d %s", r.code, r.body)
			case f := <-l.frames:
				id, _ := f["requestId"].(string)
				l.raw(rawChunk(id, chunkData("served")))
				l.raw(`{"type":"done","requestId":"` + id + `"}`)
			case <-time.After(guard):
				t.Fatal("the call hung")
			}
			if r := wait(t, res); r.code != 200 || !strings.Contains(string(r.body), "served") {
				t.Fatalf("%d %s", r.code, r.body)
			}
		})
	}
}
