package wsconn_test

import (
	"testing"
	"unicode/utf8"

	"github.com/funduq/funduq-go/broker-node/wsconn"
	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/internal/leaktest"
)

func TestMain(m *testing.M) { leaktest.Main(m) }

func TestLimit(t *testing.T) {
	if wsconn.Limit(0) != wsconn.MaxFrame || wsconn.Limit(-1) != wsconn.MaxFrame || wsconn.Limit(10) != 10 {
		t.Fatal("Limit")
	}
	if config.DefaultBrokerLimits().MaxFrame != wsconn.MaxFrame {
		t.Fatal("config's default frame size is not wsconn.MaxFrame")
	}
}

func TestClipKeepsUTF8(t *testing.T) {
	for _, s := range []string{"héllo wörld", "日本語テキスト", "plain"} {
		for n := 0; n <= len(s); n++ {
			if c := wsconn.Clip(s, n); len(c) > n || !utf8.ValidString(c) {
				t.Fatalf("Clip(%q, %d) = %q", s, n, c)
			}
		}
	}
}
