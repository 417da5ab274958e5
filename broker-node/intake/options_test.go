package intake

import (
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/store"
)

func TestBackoff(t *testing.T) {
	lo, hi := 100*time.Millisecond, 5*time.Second
	least := func(int64) int64 { return 0 }
	most := func(n int64) int64 { return n - 1 }
	for attempt := 1; attempt <= 100; attempt++ {
		full := min(lo<<min(attempt-1, 30), hi)
		top := backoff(attempt, lo, hi, most)
		bottom := backoff(attempt, lo, hi, least)
		if top != full {
			t.Errorf("attempt %d: most jitter gives %v, want %v", attempt, top, full)
		}
		if want := max(full/2, lo); bottom != want {
			t.Errorf("attempt %d: least jitter gives %v, want %v", attempt, bottom, want)
		}
		if d := backoff(attempt, lo, hi, randJitter); d < lo || d > hi {
			t.Errorf("attempt %d: %v outside [%v, %v]", attempt, d, lo, hi)
		}
	}
}

func TestOptionsDefaults(t *testing.T) {
	o := Options{PollInterval: -1, ReconnectMin: time.Second, ReconnectMax: time.Millisecond}.withDefaults()
	if o.PollInterval != DefaultPollInterval || o.PingInterval != DefaultPingInterval ||
		o.IOTimeout != DefaultIOTimeout || o.Logger == nil {
		t.Errorf("defaults not applied: %+v", o)
	}
	if o.ReconnectMin != time.Second || o.ReconnectMax != time.Second {
		t.Errorf("ReconnectMax below ReconnectMin: got %v..%v", o.ReconnectMin, o.ReconnectMax)
	}
	o = Options{}.withDefaults()
	if o.ReconnectMin != DefaultReconnectMin || o.ReconnectMax != DefaultReconnectMax {
		t.Errorf("reconnect defaults: %v..%v", o.ReconnectMin, o.ReconnectMax)
	}
}

func TestKinds(t *testing.T) {
	want := map[string]string{
		store.ChannelRunQueued: "queued", store.ChannelRunCancel: "cancel", store.ChannelRunResumed: "resumed",
	}
	for _, ch := range store.Channels {
		k, ok := KindOf(ch)
		if !ok || k.Channel() != ch || k.String() != want[ch] {
			t.Errorf("channel %s: kind %v ok=%v, channel back %q", ch, k, ok, k.Channel())
		}
	}
	if len(store.Channels) != len(want) {
		t.Errorf("store.Channels has %d channels, intake knows %d", len(store.Channels), len(want))
	}
	if _, ok := KindOf("funduq_other"); ok {
		t.Error("unknown channel mapped")
	}
	if s := Kind(0).String(); s != "Kind(0)" {
		t.Errorf("Kind(0) = %q", s)
	}
}
