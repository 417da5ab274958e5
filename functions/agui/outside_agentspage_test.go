package agui_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/functions/door"
)

// seedStrangers records agents registered by keys nobody serves any more
// (what many stranger keys leave behind, design.md §Open questions
// "Admission is open"): keys key-0 … key-(keys-1), each with perKey agents
// s0000 … of metaBytes bytes of metadata, last seen ago (a PostgreSQL
// interval; "0" is now).
func seedStrangers(t *testing.T, h *nodetest.Harness, first, keys, perKey, metaBytes int, ago string) {
	t.Helper()
	ctx := context.Background()
	if _, err := h.DB().Exec(ctx, `INSERT INTO providers (public_key, fingerprint)
		SELECT lpad(to_hex(k), 64, '0'), lpad(to_hex(k), 16, '0') FROM generate_series($1::int, $2::int) k`,
		first, first+keys-1); err != nil {
		t.Fatal(err)
	}
	if _, err := h.DB().Exec(ctx, `INSERT INTO agents (provider_key, name, description, metadata, last_seen_at, unserved_since)
		SELECT lpad(to_hex(k), 64, '0'), 's' || lpad(i::text, 4, '0'), 'a stranger''s agent',
			CASE WHEN $4::int > 0 THEN json_build_object('pad', repeat('x', $4::int))::jsonb ELSE '{}' END,
			now() - $5::interval, now() - $5::interval
		FROM generate_series($1::int, $2::int) k, generate_series(1, $3::int) i`,
		first, first+keys-1, perKey, metaBytes, ago); err != nil {
		t.Fatal(err)
	}
}

// The page sizes of GET /agents (door.DefaultAgentsPage, door.MaxAgentsPage),
// as a caller reads them in the README.
const (
	defaultAgentsPage = 100
	maxAgentsPage     = 500
)

// agentsPage is one GET /agents answer as a caller reads it.
type agentsPage struct {
	Status  int
	Bytes   int
	Keys    []string
	Agents  []string // providerKey/name
	Online  map[string]bool
	More    bool
	After   string
	Code    string
	Message string
	Body    []byte
}

func getAgents(t *testing.T, u string) agentsPage {
	t.Helper()
	resp, cancel := do(t, "GET", u, "", nil)
	defer cancel()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	p := agentsPage{Status: resp.StatusCode, Bytes: len(b), Body: b, Online: map[string]bool{}}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("GET %s: %v: %.200s", u, err, b)
	}
	for k := range m {
		p.Keys = append(p.Keys, k)
	}
	slices.Sort(p.Keys)
	var s struct {
		Agents []struct {
			ProviderKey, Name string
			Online            bool
		} `json:"agents"`
		HasMore   bool   `json:"has_more"`
		NextAfter string `json:"next_after"`
		Error     struct{ Code, Message string }
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	for _, a := range s.Agents {
		id := a.ProviderKey + "/" + a.Name
		p.Agents = append(p.Agents, id)
		p.Online[id] = a.Online
	}
	p.More, p.After, p.Code, p.Message = s.HasMore, s.NextAfter, s.Error.Code, s.Error.Message
	return p
}

// allAgents follows next_after from the first page (query: its ?limit=,
// say) to the last, checking each page's bounds, and returns the pages.
func allAgents(t *testing.T, base, query string, perPage int) []agentsPage {
	t.Helper()
	var pages []agentsPage
	after := ""
	for {
		q := query
		if after != "" {
			q += "&after=" + url.QueryEscape(after)
		}
		p := getAgents(t, base+"/agents?"+q)
		if p.Status != 200 {
			t.Fatalf("page %d (%s): %d %s", len(pages)+1, q, p.Status, p.Body)
		}
		if p.Bytes > lambdaLimit || len(p.Agents) > perPage || len(p.Agents) == 0 {
			t.Fatalf("page %d (%s): %d agents in %d bytes", len(pages)+1, q, len(p.Agents), p.Bytes)
		}
		pages = append(pages, p)
		if !p.More {
			if p.After != "" {
				t.Fatalf("the last page names a next_after %q", p.After)
			}
			return pages
		}
		if p.After == "" || len(pages) > 1000 {
			t.Fatalf("page %d says has_more with next_after %q", len(pages), p.After)
		}
		after = p.After
	}
}

// GET /agents is one bounded page (design.md §The doors, "GET /agents is
// paged"): with 5,000 agents of 500 stranger keys recorded, a caller gets
// the first 100 with has_more and next_after; following ?after= reads every
// listed agent once, in one order, the honest provider's online among them,
// and none hidden for age. ?limit= asks for up to 500. (On main: one 200
// listing all 5,001.)
func TestAgentsListIsPaged(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	seedStrangers(t, h, 1, 500, 10, 0, "0")
	seedStrangers(t, h, 501, 20, 3, 0, "8 days") // hidden: nobody served them for a week
	srv := startDoor(t, h, nil)

	first := getAgents(t, srv.URL+"/agents")
	if first.Status != 200 || len(first.Agents) != defaultAgentsPage || !first.More || first.After == "" {
		t.Fatalf("GET /agents: %d, %d agents in %d bytes, has_more=%v next_after=%q; want %d with has_more",
			first.Status, len(first.Agents), first.Bytes, first.More, first.After, defaultAgentsPage)
	}
	if !slices.Equal(first.Keys, []string{"agents", "has_more", "next_after"}) {
		t.Fatalf("keys %v", first.Keys)
	}
	for _, q := range []string{"", "limit=" + strconv.Itoa(maxAgentsPage), "limit=7"} {
		perPage := defaultAgentsPage
		if n, ok := strings.CutPrefix(q, "limit="); ok {
			perPage, _ = strconv.Atoi(n)
		}
		pages := allAgents(t, srv.URL, q, perPage)
		var ids []string
		online := map[string]bool{}
		for i, pg := range pages {
			if i < len(pages)-1 && len(pg.Agents) != perPage {
				t.Fatalf("%q: page %d holds %d agents, want %d", q, i+1, len(pg.Agents), perPage)
			}
			ids = append(ids, pg.Agents...)
			for k, v := range pg.Online {
				online[k] = v
			}
		}
		if len(ids) != 5001 || len(online) != 5001 {
			t.Fatalf("%q: paged %d agents (%d distinct) over %d pages, want 5001 once each", q, len(ids), len(online), len(pages))
		}
		if !slices.IsSorted(ids) {
			t.Fatalf("%q: the pages are not in one order", q)
		}
		if !online[p.Key+"/echo"] {
			t.Fatalf("%q: the honest provider's echo listed %v", q, online[p.Key+"/echo"])
		}
	}
	// A short list is answered as it always was: no paging keys.
	h2 := nodetest.Start(t, nil)
	p2 := h2.Connect(0xe2, nil)
	p2.Register("echo", "other")
	short := getAgents(t, startDoor(t, h2, nil).URL+"/agents")
	if short.Status != 200 || len(short.Agents) != 2 || !slices.Equal(short.Keys, []string{"agents"}) {
		t.Fatalf("a short list: %d %v keys %v", short.Status, short.Agents, short.Keys)
	}
}

// A page is bounded in bytes too: 200 agents of 60 KB metadata each (each
// within FUNDUQ_MAX_AGENT_CARD_BYTES) are 12 MB, twice what a Lambda
// function may answer; every page stays under it and paging reads all.
// (On main: one 200 of 12 MB.)
func TestAgentsPageIsBoundedInBytes(t *testing.T) {
	h := nodetest.Start(t, nil)
	seedStrangers(t, h, 1, 20, 10, 60_000, "0")
	srv := startDoor(t, h, nil)
	first := getAgents(t, srv.URL+"/agents")
	if first.Status != 200 || first.Bytes > lambdaLimit || !first.More {
		t.Fatalf("GET /agents: %d, %d agents in %d bytes, has_more=%v", first.Status, len(first.Agents), first.Bytes, first.More)
	}
	n := 0
	for _, pg := range allAgents(t, srv.URL, "limit="+strconv.Itoa(maxAgentsPage), maxAgentsPage) {
		n += len(pg.Agents)
	}
	if n != 200 {
		t.Fatalf("paged %d agents, want 200", n)
	}
}

// A bad ?limit= or ?after= is a typed 400 naming the parameter; a cursor
// naming no agent (one since removed, say) is a place in the order, not a
// refusal.
func TestAgentsPageRefusals(t *testing.T) {
	h := nodetest.Start(t, nil)
	seedStrangers(t, h, 1, 3, 2, 0, "0")
	srv := startDoor(t, h, nil)
	first := getAgents(t, srv.URL+"/agents?limit=2")
	if first.Status != 200 || len(first.Agents) != 2 || !first.More {
		t.Fatalf("limit=2: %d %v more=%v", first.Status, first.Agents, first.More)
	}
	cur := url.QueryEscape(first.After)
	b64 := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	key := strings.Repeat("0", 63) + "1"
	key10 := strings.Repeat("0", 63) + "a"
	for _, q := range []string{"limit=0", "limit=-1", "limit=x", "limit=", "limit=1.5", "limit=501", "limit=99999999999999999999",
		"limit=1&limit=2", "after=", "after=nope", "after=%2A%2A", "after=" + b64("a1."), "after=" + b64("a1."+key),
		"after=" + b64("a1."+key+"/"), "after=" + b64("a1."+key+"/bad name"), "after=" + b64("a1."+strings.ToUpper(key10)+"/s0001"),
		"after=" + b64("a1.0a/s0001"), "after=" + b64("a2."+key+"/s0001"), "after=" + b64(key+"/s0001"),
		"after=" + b64("a1."+key+"/"+strings.Repeat("n", 129)), "after=" + strings.Repeat("A", 400), "after=" + cur + "&after=" + cur} {
		got := getAgents(t, srv.URL+"/agents?"+q)
		name := strings.SplitN(q, "=", 2)[0]
		if got.Status != 400 || got.Code != door.CodeBadRequest || !strings.Contains(got.Message, name) {
			t.Fatalf("%s: %d %s %q, want 400 %s naming %s", q, got.Status, got.Code, got.Message, door.CodeBadRequest, name)
		}
	}
	// Past an agent nobody registered, between s0001 and s0002 of key 1.
	got := getAgents(t, srv.URL+"/agents?after="+b64("a1."+key+"/s0001x"))
	if got.Status != 200 || len(got.Agents) != 5 || got.Agents[0] != key+"/s0002" || got.More {
		t.Fatalf("after an unknown name: %d %v more=%v", got.Status, got.Agents, got.More)
	}
	// Past the last: an empty page, and no more.
	got = getAgents(t, srv.URL+"/agents?after="+b64("a1."+strings.Repeat("f", 64)+"/z"))
	if got.Status != 200 || len(got.Agents) != 0 || got.More || got.After != "" {
		t.Fatalf("after the last: %d %s", got.Status, got.Body)
	}
}
