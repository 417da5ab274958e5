package agui_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/functions/door"
)

// growThread appends n messages of size bytes of content to thread, as a
// caller could by running it long enough (named long-1 … long-n, oldest
// first).
func growThread(t *testing.T, h *nodetest.Harness, thread string, n, size int) {
	t.Helper()
	_, err := h.DB().Exec(context.Background(), `INSERT INTO thread_messages (thread_id, run_id, message_id, message, origin)
		SELECT $1, (SELECT run_id FROM runs WHERE thread_id = $1 LIMIT 1), 'long-' || i,
			json_build_object('id', 'long-' || i, 'role', 'user', 'content', repeat('x', $3)), 'caller'
		FROM generate_series(1, $2) i ORDER BY i`, thread, n, size)
	if err != nil {
		t.Fatal(err)
	}
}

// threadMessageIDs lists the ids of a thread's stored messages in thread order.
func threadMessageIDs(t *testing.T, h *nodetest.Harness, thread string) []string {
	t.Helper()
	rows, err := h.DB().Query(context.Background(), `SELECT message->>'id' FROM thread_messages WHERE thread_id = $1 ORDER BY id`, thread)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// omittedMsg is an entry of a snapshot's omitted_messages.
type omittedMsg struct {
	MessageID string `json:"message_id"`
	Bytes     int    `json:"bytes"`
}

// snapPage is one snapshot as a caller reads it: its keys, its message
// ids and its size.
type snapPage struct {
	Status  int
	Bytes   int
	Keys    []string
	IDs     []string
	More    bool
	Before  string
	Omitted []omittedMsg
	Body    []byte
}

func readSnap(t *testing.T, status int, b []byte) snapPage {
	t.Helper()
	p := snapPage{Status: status, Bytes: len(b), Body: b}
	if status != 200 {
		return p
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("snapshot: %v: %.200s", err, b)
	}
	for k := range m {
		p.Keys = append(p.Keys, k)
	}
	slices.Sort(p.Keys)
	var s struct {
		Messages        []struct{ ID string } `json:"messages"`
		HasMore         bool                  `json:"has_more"`
		NextBefore      string                `json:"next_before"`
		OmittedMessages []omittedMsg          `json:"omitted_messages"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	for _, m := range s.Messages {
		p.IDs = append(p.IDs, m.ID)
	}
	p.More, p.Before, p.Omitted = s.HasMore, s.NextBefore, s.OmittedMessages
	return p
}

func getSnap(t *testing.T, u string, hdr map[string]string) snapPage {
	t.Helper()
	resp, cancel := do(t, "GET", u, "", hdr)
	defer cancel()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return readSnap(t, resp.StatusCode, b)
}

// lambdaLimit is the most a Lambda function may answer (6 MB); a page
// must stay under it with room for the rest of a response.
const lambdaLimit = 6_000_000

// readAllPages reads a thread's snapshot from the newest page back,
// following next_before, and returns the pages.
func readAllPages(t *testing.T, get func(query string) snapPage) []snapPage {
	t.Helper()
	var pages []snapPage
	query := ""
	for {
		p := get(query)
		if p.Status != 200 {
			t.Fatalf("page %d (%s): %d %s", len(pages)+1, query, p.Status, p.Body)
		}
		if p.Bytes > lambdaLimit {
			t.Fatalf("page %d answered %d bytes in one 200", len(pages)+1, p.Bytes)
		}
		pages = append(pages, p)
		if !p.More {
			if p.Before != "" {
				t.Fatalf("the last page names a next_before %q", p.Before)
			}
			return pages
		}
		if p.Before == "" || len(pages) > 100 {
			t.Fatalf("page %d says has_more with next_before %q", len(pages), p.Before)
		}
		query = "?before=" + url.QueryEscape(p.Before)
	}
}

// inOrder is every page's message ids, oldest page first: the thread as
// paging back read it.
func inOrder(pages []snapPage) []string {
	var ids []string
	for i := len(pages) - 1; i >= 0; i-- {
		ids = append(ids, pages[i].IDs...)
	}
	return ids
}

// A thread snapshot of a long thread (12 MiB, above the 6 MB a Lambda
// function may answer) is one bounded page of its newest messages with
// has_more and next_before; paging back with ?before= reads every message
// once, in thread order, and the last page says no more. (On main: one
// 200 of 12 MiB.)
func TestLongThreadSnapshotIsBounded(t *testing.T) {
	h, _, srv, thread := echoThread(t, 0xe1)
	growThread(t, h, thread, 12, 1<<20)

	pages := readAllPages(t, func(q string) snapPage { return getSnap(t, srv.URL+"/threads/"+thread+q, nil) })
	if len(pages) < 3 {
		t.Fatalf("12 MiB of messages came in %d pages", len(pages))
	}
	if first := pages[0]; !first.More || first.IDs[len(first.IDs)-1] != "long-12" {
		t.Fatalf("the first page is not the newest: %v more=%v", first.IDs, first.More)
	}
	if got, want := inOrder(pages), threadMessageIDs(t, h, thread); !slices.Equal(got, want) {
		t.Fatalf("paging back read %v, the thread holds %v", got, want)
	}
	// A page's keys: has_more and next_before only while there is more.
	want := []string{"active_run", "has_more", "messages", "next_before", "thread_id"}
	if !slices.Equal(pages[0].Keys, want) {
		t.Fatalf("a page with more has keys %v, want %v", pages[0].Keys, want)
	}
	if last := pages[len(pages)-1]; !slices.Equal(last.Keys, []string{"active_run", "messages", "thread_id"}) {
		t.Fatalf("the last page has keys %v", last.Keys)
	}

	// ?limit= asks for fewer: the newest two, then the two before them.
	two := getSnap(t, srv.URL+"/threads/"+thread+"?limit=2", nil)
	if two.Status != 200 || !slices.Equal(two.IDs, []string{"long-11", "long-12"}) || !two.More {
		t.Fatalf("limit=2: %d %v more=%v", two.Status, two.IDs, two.More)
	}
	next := getSnap(t, srv.URL+"/threads/"+thread+"?limit=2&before="+url.QueryEscape(two.Before), nil)
	if !slices.Equal(next.IDs, []string{"long-9", "long-10"}) || !next.More {
		t.Fatalf("limit=2, the page before: %v more=%v", next.IDs, next.More)
	}
}

// A short thread's snapshot is what it always was: every message, and
// only the keys thread_id, messages and active_run.
func TestShortThreadSnapshotIsWhole(t *testing.T) {
	h, _, srv, thread := echoThread(t, 0xe1)
	growThread(t, h, thread, 3, 10)
	got := getSnap(t, srv.URL+"/threads/"+thread, nil)
	if got.Status != 200 || !slices.Equal(got.Keys, []string{"active_run", "messages", "thread_id"}) ||
		!slices.Equal(got.IDs, threadMessageIDs(t, h, thread)) {
		t.Fatalf("short thread: %d %s", got.Status, got.Body)
	}
	// A limit as large as the thread, or the largest, is the same answer.
	for _, q := range []string{"?limit=5", "?limit=1000"} {
		if again := getSnap(t, srv.URL+"/threads/"+thread+q, nil); string(again.Body) != string(got.Body) {
			t.Fatalf("%s: %s, without: %s", q, again.Body, got.Body)
		}
	}
}

// A message larger than a whole page (here 5 MiB, folded from a long
// reply) is named under omitted_messages with its size, not sent and not
// silently dropped; the messages around it page as any other. (On main:
// one 200 of 7 MiB holding it.)
func TestOversizedMessageIsNamedNotSent(t *testing.T) {
	h, _, srv, thread := echoThread(t, 0xe1)
	growThread(t, h, thread, 2, 1<<20)
	if _, err := h.DB().Exec(context.Background(), `INSERT INTO thread_messages (thread_id, run_id, message_id, message, origin)
		SELECT $1, (SELECT run_id FROM runs WHERE thread_id = $1 LIMIT 1), 'huge',
			json_build_object('id', 'huge', 'role', 'assistant', 'content', repeat('<', 5 << 20)), 'agent'`, thread); err != nil {
		t.Fatal(err)
	}
	if _, err := h.DB().Exec(context.Background(), `INSERT INTO thread_messages (thread_id, run_id, message_id, message, origin)
		SELECT $1, (SELECT run_id FROM runs WHERE thread_id = $1 LIMIT 1), 'after', '{"id":"after","role":"user","content":"<b>"}', 'caller'`, thread); err != nil {
		t.Fatal(err)
	}
	pages := readAllPages(t, func(q string) snapPage { return getSnap(t, srv.URL+"/threads/"+thread+q, nil) })
	var omitted []omittedMsg
	for _, pg := range pages {
		omitted = append(omitted, pg.Omitted...)
	}
	want := slices.DeleteFunc(threadMessageIDs(t, h, thread), func(id string) bool { return id == "huge" })
	if got := inOrder(pages); !slices.Equal(got, want) || len(omitted) != 1 || omitted[0].MessageID != "huge" ||
		omitted[0].Bytes < 5<<20 {
		t.Fatalf("read %v omitted %+v, want %v and huge named", got, omitted, want)
	}
	// The messages' bytes are sent as stored, not HTML-escaped (which
	// would make a page of "<" six times its bound).
	if !strings.Contains(string(pages[0].Body), `"content":"<b>"`) {
		t.Fatalf("the newest page: %.300s", pages[0].Body)
	}
}

// A bad ?limit= or ?before= is a typed 400 naming the parameter, whether
// or not the thread exists; a stranger holding a bound thread's id gets
// exactly the unknown id's answer on every page, cursor or not.
func TestSnapshotPageRefusals(t *testing.T) {
	a := newAuthz(t)
	thread, _ := a.completedBound()
	growThread(t, a.h, thread, 5, 1<<20)
	party := view(a.head, thread, time.Now().Unix())
	first := getSnap(t, a.srv+"/threads/"+thread, party)
	if first.Status != 200 || !first.More {
		t.Fatalf("the head's first page: %d %.300s", first.Status, first.Body)
	}
	cur := url.QueryEscape(first.Before)
	b64 := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, q := range []string{"limit=0", "limit=-1", "limit=x", "limit=", "limit=1.5", "limit=1001", "limit=99999999999999999999",
		"limit=1&limit=2", "before=", "before=nope", "before=%2A%2A", "before=" + b64("m1.0"), "before=" + b64("m1.-5"),
		"before=" + b64("m1.x"), "before=" + b64("7"), "before=" + strings.Repeat("A", 100), "before=" + cur + "&before=" + cur} {
		for _, id := range []string{thread, "thread_000000000000000000000000"} {
			got := a.get("/threads/"+id+"?"+q, party)
			name := strings.SplitN(q, "=", 2)[0]
			if got.Status != 400 || got.Code != door.CodeBadRequest || !strings.Contains(got.Message, name) {
				t.Fatalf("%s on %s: %+v, want 400 %s naming %s", q, id, got, door.CodeBadRequest, name)
			}
		}
	}
	unknown := a.get("/threads/thread_000000000000000000000000", nil)
	for _, q := range []string{"", "?limit=1", "?before=" + cur, "?limit=3&before=" + cur} {
		got := a.get("/threads/"+thread+q, nil)
		got.Message = strings.ReplaceAll(got.Message, thread, "thread_000000000000000000000000")
		unknownLike(t, got, unknown)
		// The same with a stranger's own view proof.
		got = a.get("/threads/"+thread+q, view(a.stray, thread, time.Now().Unix()))
		got.Message = strings.ReplaceAll(got.Message, thread, "thread_000000000000000000000000")
		unknownLike(t, got, unknown)
	}
	// A cursor of the right shape that funduq did not make for this
	// thread — one of another thread the head reads too, a forged one —
	// is refused to the head like any bad cursor; the seal is checked once
	// the caller may read the thread, so a stranger, and anyone asking an
	// unknown id, still gets what an unknown id gets.
	elsewhere, _ := a.completedBound()
	growThread(t, a.h, elsewhere, 5, 1<<20)
	theirs := getSnap(t, a.srv+"/threads/"+elsewhere, view(a.head, elsewhere, time.Now().Unix()))
	if theirs.Status != 200 || !theirs.More {
		t.Fatalf("the head's first page of another thread: %d %.300s", theirs.Status, theirs.Body)
	}
	for _, c := range []string{theirs.Before, strings.Repeat("A", len(first.Before))} {
		q := "?before=" + url.QueryEscape(c)
		if got := a.get("/threads/"+thread+q, party); got.Status != 400 || got.Code != door.CodeBadRequest || !strings.Contains(got.Message, "before") {
			t.Fatalf("cursor %s on %s: %+v, want 400 %s naming before", c, thread, got, door.CodeBadRequest)
		}
		unknownLike(t, a.get("/threads/thread_000000000000000000000000"+q, nil), unknown)
		for _, hdr := range []map[string]string{nil, view(a.stray, thread, time.Now().Unix())} {
			got := a.get("/threads/"+thread+q, hdr)
			got.Message = strings.ReplaceAll(got.Message, thread, "thread_000000000000000000000000")
			unknownLike(t, got, unknown)
		}
	}
	// The party pages back to the end.
	pages := readAllPages(t, func(q string) snapPage {
		return getSnap(t, a.srv+"/threads/"+thread+q, view(a.head, thread, time.Now().Unix()))
	})
	if got, want := inOrder(pages), threadMessageIDs(t, a.h, thread); !slices.Equal(got, want) {
		t.Fatalf("the head paged %v, the thread holds %v", got, want)
	}
}

// The snapshot a resume with nothing to land on gets (the answer that
// lost its race) is the same bounded newest page, with next_before to
// read further back through GET /threads/{id}. (On main: one 200 of
// 12 MiB.)
func TestResumeSnapshotOfLongThreadIsBounded(t *testing.T) {
	h, p, srv, thread := echoThread(t, 0xe1)
	growThread(t, h, thread, 12, 1<<20)
	runs := runCount(t, h)
	resp, cancel := do(t, "POST", aguiURL(srv, p.Key, "echo"),
		fmt.Sprintf(`{"threadId":%q,"runId":"late","messages":[],%s}`, thread, resumeInt1), nil)
	defer cancel()
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	got := readSnap(t, resp.StatusCode, b)
	if got.Status != 200 || got.Bytes > lambdaLimit || !got.More || got.IDs[len(got.IDs)-1] != "long-12" {
		t.Fatalf("resume snapshot: %d, %d bytes, more=%v, %v", got.Status, got.Bytes, got.More, got.IDs)
	}
	if runCount(t, h) != runs {
		t.Fatal("a resume with nothing to land on wrote a run")
	}
	older := getSnap(t, srv.URL+"/threads/"+thread+"?before="+url.QueryEscape(got.Before), nil)
	if older.Status != 200 || len(older.IDs) == 0 || older.IDs[len(older.IDs)-1] != "long-"+fmt.Sprint(12-len(got.IDs)) {
		t.Fatalf("the page before the resume snapshot: %d %v", older.Status, older.IDs)
	}
}

// A message whose stored size is exactly the page bound (4 MiB) is either
// sent or named under omitted_messages, and paging goes on past it: the
// messages older than it stay readable. (On main: the page before it says
// has_more with a next_before that the door refuses with 400, so the
// message and every older one are unreachable and it is named nowhere.)
func TestMessageOfExactlyAPageIsNotLost(t *testing.T) {
	h, _, srv, thread := echoThread(t, 0xe2)
	growThread(t, h, thread, 2, 100)
	// The content is padded so the stored message is exactly 4 MiB.
	if _, err := h.DB().Exec(context.Background(), `INSERT INTO thread_messages (thread_id, run_id, message_id, message, origin)
		SELECT $1, (SELECT run_id FROM runs WHERE thread_id = $1 LIMIT 1), 'edge',
			jsonb_build_object('id', 'edge', 'role', 'assistant', 'content', repeat('x', $2 -
				octet_length(jsonb_build_object('id', 'edge', 'role', 'assistant', 'content', '')::text))), 'agent'`,
		thread, 4<<20); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := h.DB().QueryRow(context.Background(), `SELECT octet_length(message::text) FROM thread_messages
		WHERE thread_id = $1 AND message_id = 'edge'`, thread).Scan(&n); err != nil || n != 4<<20 {
		t.Fatalf("edge stored as %d bytes (%v), want %d", n, err, 4<<20)
	}
	if _, err := h.DB().Exec(context.Background(), `INSERT INTO thread_messages (thread_id, run_id, message_id, message, origin)
		SELECT $1, (SELECT run_id FROM runs WHERE thread_id = $1 LIMIT 1), 'after', '{"id":"after","role":"user","content":"hi"}', 'caller'`, thread); err != nil {
		t.Fatal(err)
	}
	pages := readAllPages(t, func(q string) snapPage { return getSnap(t, srv.URL+"/threads/"+thread+q, nil) })
	got := inOrder(pages)
	for _, pg := range pages {
		for _, o := range pg.Omitted {
			got = append(got, "omitted:"+o.MessageID)
		}
	}
	all := threadMessageIDs(t, h, thread)
	for _, id := range all {
		if !slices.Contains(got, id) && !slices.Contains(got, "omitted:"+id) {
			t.Fatalf("message %s neither sent nor named; read %v of %v", id, got, all)
		}
	}
}

// A party to one thread learns nothing of other threads from its cursors.
// next_before was the global thread_messages sequence in the clear, so two
// cursors of one's own thread showed how many messages every other thread
// gained in between; now it is sealed under the thread's own key
// (design.md §The doors, "A thread snapshot is one bounded page").
func TestCursorTellsNothingOfOtherThreads(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe4, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	mine := doneThread(t, h, p, aguiURL(srv, p.Key, "echo"))
	other := doneThread(t, h, p, aguiURL(srv, p.Key, "echo"))
	// A deployment that has stored many messages: its ids are long
	// enough that no cursor holds one of them by chance.
	if _, err := h.DB().Exec(context.Background(), `SELECT setval(pg_get_serial_sequence('thread_messages', 'id'), 1000000000000000)`); err != nil {
		t.Fatal(err)
	}
	added := 0
	add := func(thread string, n int) {
		t.Helper()
		for range n {
			added++
			if _, err := h.DB().Exec(context.Background(), `INSERT INTO thread_messages (thread_id, run_id, message_id, message, origin)
				SELECT $1, (SELECT run_id FROM runs WHERE thread_id = $1 LIMIT 1), $2, json_build_object('id', $2::text, 'role', 'user', 'content', 'x'), 'caller'`,
				thread, fmt.Sprint("c-", added)); err != nil {
				t.Fatal(err)
			}
		}
	}
	cursorAfterAdding := func() string {
		t.Helper()
		add(mine, 1)
		c := getSnap(t, srv.URL+"/threads/"+mine+"?limit=1", nil).Before
		// The cursor names the newest message; whatever its form, it must
		// not carry that message's place in the sequence every thread
		// shares, as text or as a binary integer.
		var id int64
		if err := h.DB().QueryRow(context.Background(), `SELECT max(id) FROM thread_messages WHERE thread_id = $1`, mine).Scan(&id); err != nil {
			t.Fatal(err)
		}
		decoded, err := base64.RawURLEncoding.DecodeString(c)
		if err != nil {
			decoded = []byte(c)
		}
		be := binary.BigEndian.AppendUint64(nil, uint64(id))
		le := binary.LittleEndian.AppendUint64(nil, uint64(id))
		for _, form := range [][]byte{[]byte(fmt.Sprint(id)), be, le, be[4:], le[:4]} {
			if bytes.Contains(decoded, form) || strings.Contains(c, string(form)) {
				t.Fatalf("cursor %q (%q) carries message row %d as %q", c, decoded, id, form)
			}
		}
		return string(decoded)
	}
	quiet := []string{cursorAfterAdding(), cursorAfterAdding()}
	a := cursorAfterAdding()
	add(other, 50)
	b := cursorAfterAdding()
	// Between quiet cursors and between busy ones the step must look the same.
	var q0, q1, n0, n1 int64
	fmt.Sscanf(quiet[0], "m1.%d", &q0)
	fmt.Sscanf(quiet[1], "m1.%d", &q1)
	fmt.Sscanf(a, "m1.%d", &n0)
	fmt.Sscanf(b, "m1.%d", &n1)
	if q0 != 0 && n1-n0 != q1-q0 {
		t.Fatalf("cursors %q..%q step %d while another thread grew, %d while it did not", a, b, n1-n0, q1-q0)
	}
	// The cursor still pages: before the newest is the one added before
	// the other thread grew.
	older := getSnap(t, srv.URL+"/threads/"+mine+"?limit=1&before="+url.QueryEscape(base64.RawURLEncoding.EncodeToString([]byte(b))), nil)
	if older.Status != 200 || len(older.IDs) != 1 || older.IDs[0] != fmt.Sprint("c-", added-51) {
		t.Fatalf("the page before the newest: %d %v", older.Status, older.IDs)
	}
}

// echoThread starts a node whose provider (of seed) serves "echo", an
// AG-UI door over it, and a thread with one finished run on it.
func echoThread(t *testing.T, seed byte) (*nodetest.Harness, *nodetest.Prov, *httptest.Server, string) {
	t.Helper()
	h := nodetest.Start(t, nil)
	p := h.Connect(seed, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	return h, p, srv, doneThread(t, h, p, aguiURL(srv, p.Key, "echo"))
}
