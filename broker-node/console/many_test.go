package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/broker"
	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/browsertest"
	"github.com/funduq/funduq-go/core/wire"
)

// providersListed is how many providers, and how many quality records, the
// console's state lists (console.ProvidersListed).
const providersListed = 100

// Keys cost a stranger nothing (design.md §The provider wire, "Admission"):
// many of them, each serving one agent under the longest name, and many
// more counted once, keep the console's state bounded on the leader and on
// a standby — the first providersListed of each list, and how many there
// are — and the withdrawn provider, whatever its key, is among those
// listed. Its state was every provider ever counted and every connected
// one, read every 1.5 s by each open console.
func TestConsoleManyProvidersBounded(t *testing.T) {
	h := nodetest.Start(t, withToken)
	sb := h.Peer("standby-node")
	const connected, counted = providersListed + 20, 3 * providersListed
	name := strings.Repeat("N", broker.MaxProviderNameBytes)
	for i := range connected {
		p := h.Connect(byte(i+1), nil)
		p.Send(wire.Register{Type: wire.TypeRegister, ProviderName: name, Agents: []wire.Registration{{Name: "echo"}}})
		p.Expect(wire.TypeRegistered, nil)
	}
	// Counted providers no longer connected, the last by key withdrawn.
	ctx := context.Background()
	for _, q := range []string{
		`INSERT INTO providers (public_key, fingerprint, display_name)
		 SELECT 'e' || lpad(to_hex(i), 63, '0'), 'e' || lpad(to_hex(i), 15, '0'), repeat('Q', 256) FROM generate_series(1, $1::int) i`,
		`INSERT INTO provider_quality (provider_key, refused, withdrawn_at)
		 SELECT 'e' || lpad(to_hex(i), 63, '0'), i, CASE WHEN i = $1::int THEN now() END FROM generate_series(1, $1::int) i`,
	} {
		if _, err := h.DB().Exec(ctx, q, counted); err != nil {
			t.Fatal(err)
		}
	}
	withdrawn := "e" + strings.Repeat("0", 60) + "12c" // to_hex(300)

	for _, base := range []string{h.URL, sb.URL} {
		var body string
		var s struct {
			Providers struct {
				List  []json.RawMessage `json:"list"`
				Total int               `json:"total"`
			} `json:"providers"`
			Quality struct {
				List []struct {
					Key       string `json:"key"`
					Withdrawn bool   `json:"withdrawn"`
				} `json:"list"`
				Total int `json:"total"`
			} `json:"quality"`
		}
		h.Eventually("every provider counted at "+base, func() bool {
			var resp *http.Response
			resp, body = get(t, base+"/console/api/state", "Authorization", "Bearer "+token)
			return resp.StatusCode == 200 && json.Unmarshal([]byte(body), &s) == nil && max(s.Providers.Total, len(s.Providers.List)) == connected
		})
		if len(s.Providers.List) != providersListed || len(s.Quality.List) != providersListed || s.Quality.Total != counted {
			t.Errorf("%s: %d of %d providers listed, %d of %d quality records, in %d bytes", base,
				len(s.Providers.List), s.Providers.Total, len(s.Quality.List), s.Quality.Total, len(body))
		}
		if len(s.Quality.List) == 0 || s.Quality.List[0].Key != withdrawn || !s.Quality.List[0].Withdrawn {
			t.Errorf("%s: the withdrawn provider is not listed first", base)
		}
		if len(body) > 256<<10 {
			t.Errorf("%s: a state of %d bytes", base, len(body))
		}
	}

	// The page says how many it leaves out.
	b := loggedIn(t, h.URL)
	b.Eventually("the providers left out are counted", `(document.querySelector('#providers tbody tr.more') || {}).textContent === 'and 20 more providers (120 in all; the withdrawn first, then by key)'`)
	b.Eventually("the records left out are counted", `(document.querySelector('#quality tbody tr.more') || {}).textContent.startsWith('and 200 more providers counted')`)
	if n := browsertest.Eval[int](b, `document.querySelectorAll('#providers tbody tr').length`); n != providersListed+1 {
		t.Errorf("%d provider rows", n)
	}
	b.CheckClean()
}
