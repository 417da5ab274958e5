package kyok_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/core/livefeed"
	"github.com/funduq/funduq-go/functions/agui"
	"github.com/funduq/funduq-go/provider"
)

// The whole road: a caller opts a run in over the AG-UI door naming an LLM
// offering with a private context; our SDK agent serving the run calls the
// KYOK door with the official OpenAI client and the run's token, streaming
// and then not; the LLM provider's chunks come back in order (and collapsed
// into one completion), and the caller's stream shows the
// agent's answer. The caller's context reaches the LLM provider and is
// stored nowhere readable.
func TestKyokThroughTheAGUIDoor(t *testing.T) {
	e := newEnv(t, 0)
	llm := e.attachLLM(0xd1, "gpt-4")
	llm.onRequest(streamAnswer("Bon", "jour"))

	ag, err := agui.New(agui.Options{Store: e.H.Store, Feed: livefeed.New(e.rdb, e.H.Prefix),
		Funduq: mustSigner(t, e.H.Cfg.IdentityKey), TokenSecret: []byte(secret)})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for _, p := range agui.Patterns() {
		mux.Handle(p, ag)
	}
	aguiSrv := httptest.NewServer(mux)
	defer aguiSrv.Close()

	agentSigner := mustSigner(t, nodetest.SeedHex(0xa7))
	collapsed := make(chan string, 1)
	sdk, err := provider.New(provider.Config{BaseURL: e.H.URL, Signer: agentSigner, FunduqKey: e.H.Node.FunduqKey(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Agents: []provider.Agent{{Name: "translator", Handler: func(ctx context.Context, r *provider.Run) error {
			var in struct {
				ForwardedProps struct {
					Funduq struct {
						Kyok struct{ Token string } `json:"kyok"`
					} `json:"funduq"`
				} `json:"forwardedProps"`
			}
			_ = json.Unmarshal(r.Input, &in)
			token := in.ForwardedProps.Funduq.Kyok.Token
			c := openai.NewClient(option.WithBaseURL(e.DoorURL+"/kyok/v1/"), option.WithAPIKey(token),
				option.WithMaxRetries(0), option.WithMiddleware(signer(agentSigner, token)))
			stream := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "gpt-4",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(r.LastUserText())}})
			var text strings.Builder
			for stream.Next() {
				for _, ch := range stream.Current().Choices {
					text.WriteString(ch.Delta.Content)
				}
			}
			if err := stream.Err(); err != nil {
				return err
			}
			// And once more without streaming: one collapsed completion.
			whole, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-4",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(r.LastUserText())}})
			if err != nil {
				return err
			}
			collapsed <- whole.Choices[0].Message.Content
			if err := r.Emit(ctx, map[string]any{"type": "RUN_STARTED", "threadId": r.ThreadID, "runId": r.ID}); err != nil {
				return err
			}
			if err := r.EmitText(ctx, "m1", text.String()); err != nil {
				return err
			}
			return r.Emit(ctx, map[string]any{"type": "RUN_FINISHED", "threadId": r.ThreadID, "runId": r.ID})
		}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = sdk.Run(ctx) }()
	defer func() { cancel(); wg.Wait() }()
	<-sdk.Ready()

	body := `{"threadId":"new","runId":"caller-1","messages":[{"id":"u1","role":"user","content":"hello"}],
		"tools":[],"context":[],"state":null,
		"forwardedProps":{"kyok":{"llmProvider":{"providerKey":"` + llm.Key + `","name":"gpt-4"},"context":{"voucher":"v-secret-1"}}}}`
	resp, err := http.Post(aguiSrv.URL+"/agui/"+agentSigner.PublicKeyHex()+"/translator", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var answer strings.Builder
	var runID, ended string
	sc := bufio.NewScanner(resp.Body)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for sc.Scan() {
			line := sc.Text()
			if !strings.HasPrefix(line, "data: ") {
				continue
			}
			var ev map[string]any
			_ = json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev)
			if ev["type"] == "RUN_STARTED" && runID == "" {
				runID, _ = ev["runId"].(string)
			}
			if ev["type"] == "TEXT_MESSAGE_CONTENT" {
				answer.WriteString(ev["delta"].(string))
			}
			if ev["type"] == "RUN_FINISHED" || ev["type"] == "RUN_ERROR" {
				ended = strings.TrimPrefix(line, "data: ")
				return
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(guard):
		t.Fatal("the caller's stream did not finish")
	}
	if answer.String() != "Bonjour" {
		t.Fatalf("the caller saw %q, ending %s", answer.String(), ended)
	}
	select {
	case got := <-collapsed:
		if got != "Bonjour" {
			t.Fatalf("the non-streaming completion was %q", got)
		}
	case <-time.After(guard):
		t.Fatal("the agent's non-streaming completion never came back")
	}
	req := llm.request()
	if string(req.Context) != `{"voucher":"v-secret-1"}` || req.AgentName != "translator" || req.ProviderKey != agentSigner.PublicKeyHex() {
		t.Fatalf("the LLM provider was shown %+v", req)
	}
	r := e.H.Run(runID)
	var raw string
	_ = e.H.Store.Pool().QueryRow(context.Background(), `SELECT run_input::text || coalesce((SELECT string_agg(metadata::text, '') FROM threads WHERE thread_id = $2), '')
		FROM runs WHERE run_id = $1`, runID, r.ThreadID).Scan(&raw)
	if strings.Contains(raw, "v-secret-1") {
		t.Fatal("the caller's KYOK context is stored readable")
	}
}

func mustSigner(t *testing.T, seedHex string) *identity.Signer {
	t.Helper()
	s, err := identity.NewSignerFromSeedHex(seedHex)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
