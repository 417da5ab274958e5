package agui_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/core/agui"
)

var benchEvents = map[string]json.RawMessage{
	"run_started":  json.RawMessage(`{"type":"RUN_STARTED","threadId":"thread_000000000000000000000001","runId":"run_000000000000000000000001"}`),
	"text_content": json.RawMessage(`{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"hello there, this is one token or two"}`),
	"custom_1KiB":  json.RawMessage(`{"type":"CUSTOM","name":"load","value":{"t":1764590000000000000,"pad":"` + strings.Repeat("x", 1024) + `"}}`),
	"run_finished": json.RawMessage(`{"type":"RUN_FINISHED","threadId":"thread_000000000000000000000001","runId":"run_000000000000000000000001"}`),
}

// BenchmarkValidate is the broker's check of every provider event.
func BenchmarkValidate(b *testing.B) {
	for name, ev := range benchEvents {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(ev)))
			for b.Loop() {
				if _, err := agui.Validate(ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRunError encodes the RUN_ERROR the broker synthesizes.
func BenchmarkRunError(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = agui.RunError("the provider's stream ended without RUN_FINISHED", "stream_ended_without_finishing")
	}
}

// BenchmarkFold is the broker's fold of a finished run's events into the
// agent's thread messages: a short text reply between RUN_STARTED and
// RUN_FINISHED.
func BenchmarkFold(b *testing.B) {
	evs := []json.RawMessage{benchEvents["run_started"],
		json.RawMessage(`{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}`),
		benchEvents["text_content"], benchEvents["text_content"],
		json.RawMessage(`{"type":"TEXT_MESSAGE_END","messageId":"m1"}`),
		benchEvents["run_finished"]}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := agui.Fold(evs); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRelayRewrite is the AG-UI door's rewrite of every event it
// relays: nulls dropped, and for RUN_STARTED and RUN_FINISHED the run's
// own ids (functions/agui, sse.relay).
func BenchmarkRelayRewrite(b *testing.B) {
	for name, ev := range benchEvents {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				out, err := agui.DropNulls(ev)
				if err == nil {
					_, err = agui.WithRunIDs(out, "thread_000000000000000000000001", "run_000000000000000000000002")
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
