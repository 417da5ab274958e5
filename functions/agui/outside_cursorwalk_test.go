package agui_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/funduq/funduq-go/core/identity"
)

// A caller walking a thread back with ?limit=1 reads every message it saw
// exactly once, newest first, while its own thread and another thread
// both grow between pages: a sealed cursor keeps its place as the plain id
// did, and no two pages of the walk share a cursor. Then a walk of pages
// of the 1000-message bound over 2,500 messages reads them all, in order.
func TestCursorWalkWhileThreadsGrow(t *testing.T) {
	h, p, srv, thread := echoThread(t, 0xe5)
	other := doneThread(t, h, p, aguiURL(srv, p.Key, "echo"))
	growThread(t, h, thread, 30, 10)
	want := threadMessageIDs(t, h, thread)
	add := func(th, id string) {
		t.Helper()
		if _, err := h.DB().Exec(context.Background(), `INSERT INTO thread_messages (thread_id, run_id, message_id, message, origin)
			SELECT $1, (SELECT run_id FROM runs WHERE thread_id = $1 LIMIT 1), $2, json_build_object('id', $2::text, 'role', 'user', 'content', 'x'), 'caller'`,
			th, id); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	seen := map[string]bool{}
	q := "?limit=1"
	for i := 0; ; i++ {
		p := getSnap(t, srv.URL+"/threads/"+thread+q, nil)
		if p.Status != 200 || len(p.IDs) != 1 {
			t.Fatalf("page %d (%s): %d %s", i+1, q, p.Status, p.Body)
		}
		got = append(p.IDs, got...)
		// The thread and another grow while the caller pages.
		add(thread, fmt.Sprint("late-", i))
		add(other, fmt.Sprint("other-", i))
		if !p.More {
			break
		}
		if seen[p.Before] || len(p.Before) != 22 || i > len(want)+5 {
			t.Fatalf("page %d: cursor %q (seen before: %v)", i+1, p.Before, seen[p.Before])
		}
		seen[p.Before] = true
		q = "?limit=1&before=" + url.QueryEscape(p.Before)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("the limit=1 walk read %v, the thread held %v", got, want)
	}

	// Pages at the message bound: 1000, 1000, then the rest (the 2,500 and
	// the first run's two).
	h2, _, srv2, big := echoThread(t, 0xe6)
	growThread(t, h2, big, 2500, 1)
	pages := readAllPages(t, func(q string) snapPage { return getSnap(t, srv2.URL+"/threads/"+big+q, nil) })
	var sizes []int
	for _, p := range pages {
		sizes = append(sizes, len(p.IDs))
	}
	if got, want := inOrder(pages), threadMessageIDs(t, h2, big); !slices.Equal(got, want) || !slices.Equal(sizes, []int{1000, 1000, len(want) - 2000}) {
		t.Fatalf("paged %d messages in pages of %v; the thread holds %d", len(got), sizes, len(want))
	}
}

// exact is a response as bytes: status, the headers a caller could tell
// apart by, and the body.
type exact struct {
	Status int
	Header string
	Body   string
}

func getExact(t *testing.T, u string, hdr map[string]string) exact {
	t.Helper()
	resp, cancel := do(t, "GET", u, "", hdr)
	defer cancel()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	h := resp.Header.Clone()
	h.Del("Date")
	var sb strings.Builder
	if err := h.Write(&sb); err != nil {
		t.Fatal(err)
	}
	return exact{resp.StatusCode, sb.String(), string(b)}
}

// Every cursor a party's thread did not make — another thread's, one bit
// of a real one flipped (each of its 128), the real one in std-base64, with
// '=' padding, with non-zero padding bits, repeated, empty, very long — is
// refused to the party with the one bad-cursor answer, byte for byte the
// answer to a cursor of the wrong shape; and a stranger holding the bound
// thread's id gets, byte for byte, what an unknown id gets, whatever the
// cursor.
func TestCursorRefusalsAreExact(t *testing.T) {
	a := newAuthz(t)
	thread, _ := a.completedBound()
	growThread(t, a.h, thread, 5, 10)
	party := func() map[string]string { return view(a.head, thread, time.Now().Unix()) }
	first := getSnap(t, a.srv+"/threads/"+thread+"?limit=2", party())
	if first.Status != 200 || !first.More || len(first.Before) != 22 {
		t.Fatalf("the head's first page: %d %.300s", first.Status, first.Body)
	}
	elsewhere, _ := a.completedBound()
	growThread(t, a.h, elsewhere, 5, 10)
	theirs := getSnap(t, a.srv+"/threads/"+elsewhere+"?limit=2", view(a.head, elsewhere, time.Now().Unix()))
	if theirs.Status != 200 || !theirs.More {
		t.Fatalf("the other thread's first page: %d %.300s", theirs.Status, theirs.Body)
	}
	raw, err := base64.RawURLEncoding.DecodeString(first.Before)
	if err != nil {
		t.Fatal(err)
	}
	var bad []string
	for i := range len(raw) * 8 {
		b := slices.Clone(raw)
		b[i/8] ^= 1 << (i % 8)
		bad = append(bad, "before="+base64.RawURLEncoding.EncodeToString(b))
	}
	std := base64.StdEncoding.EncodeToString(raw)
	last := first.Before[21]
	padBits := strings.Index("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", string(last))
	bad = append(bad,
		"before="+url.QueryEscape(theirs.Before),
		"before="+url.QueryEscape(first.Before+"=="),
		"before="+url.QueryEscape(first.Before[:21]+string("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"[padBits|1])),
		"before="+url.QueryEscape(first.Before)+"&before="+url.QueryEscape(first.Before),
		"before=",
		"before="+strings.Repeat("A", 22),
		"before="+strings.Repeat("A", 10000),
		"before="+url.QueryEscape(first.Before+" "),
		"before="+url.QueryEscape(" "+first.Before),
		"before="+url.QueryEscape(first.Before[:21]),
	)
	// std-base64 writes the same cursor, but for '=' padding, unless it
	// holds a '-' or '_' (about half of them do).
	bad = append(bad, "before="+url.QueryEscape(std))
	if unpadded := strings.TrimRight(std, "="); unpadded != first.Before {
		bad = append(bad, "before="+url.QueryEscape(unpadded))
	}
	refusal := getExact(t, a.srv+"/threads/"+thread+"?before=nope", party())
	if refusal.Status != 400 || !strings.Contains(refusal.Body, "before") {
		t.Fatalf("a cursor of the wrong shape: %+v", refusal)
	}
	unknownID := "thread_000000000000000000000000"
	unknown := getExact(t, a.srv+"/threads/"+unknownID, nil)
	for _, q := range bad {
		if got := getExact(t, a.srv+"/threads/"+thread+"?limit=2&"+q, party()); got != refusal {
			t.Fatalf("%.80s: the party got %+v, want the bad cursor answer %+v", q, got, refusal)
		}
	}
	// A stranger: every right-shaped cursor on the bound thread is the
	// unknown id's answer, to the byte.
	for _, q := range []string{"", "before=" + url.QueryEscape(first.Before), "before=" + url.QueryEscape(theirs.Before), bad[0], bad[77]} {
		for _, hdr := range []map[string]string{nil, view(a.stray, thread, time.Now().Unix())} {
			got := getExact(t, a.srv+"/threads/"+thread+"?"+q, hdr)
			got.Body = strings.ReplaceAll(got.Body, thread, unknownID)
			want := unknown
			if q != "" {
				want = getExact(t, a.srv+"/threads/"+unknownID+"?"+q, hdr)
			}
			if got != want || got.Status != 404 {
				t.Fatalf("%.80s: the stranger got %+v, the unknown id %+v", q, got, want)
			}
		}
	}
	// A cursor of the wrong shape is refused from the query alone: the
	// stranger gets the party's refusal, as for an unknown id.
	if got := getExact(t, a.srv+"/threads/"+thread+"?before=nope", nil); got != refusal {
		t.Fatalf("a stranger's cursor of the wrong shape: %+v, want %+v", got, refusal)
	}
	if got := getExact(t, a.srv+"/threads/"+unknownID+"?before=nope", nil); got != refusal {
		t.Fatalf("an unknown id's cursor of the wrong shape: %+v, want %+v", got, refusal)
	}
	// The real cursor still pages after all that, and it is the thread's,
	// not the reader's: every party (head, presenter, the agent's
	// provider) reads the same page with it.
	var pageOf string
	for _, s := range []*identity.Signer{a.head, a.pres, a.prov} {
		next := getExact(t, a.srv+"/threads/"+thread+"?limit=2&before="+url.QueryEscape(first.Before), view(s, thread, time.Now().Unix()))
		p := readSnap(t, next.Status, []byte(next.Body))
		if p.Status != 200 || len(p.IDs) != 2 || p.IDs[1] != "long-3" || pageOf != "" && next.Body != pageOf {
			t.Fatalf("the real cursor, read by %s: %d %v", s.PublicKeyHex(), p.Status, p.IDs)
		}
		pageOf = next.Body
	}
}

// Messages that fill a page to exactly its byte bound (two of 2 MiB less
// their comma each) page two by two: the bound is inclusive, and the
// cursor at each page's edge neither skips nor repeats the next message.
func TestCursorWalkOfPagesFilledExactly(t *testing.T) {
	h, _, srv, thread := echoThread(t, 0xe7)
	const half = 2 << 20
	if _, err := h.DB().Exec(context.Background(), `INSERT INTO thread_messages (thread_id, run_id, message_id, message, origin)
		SELECT $1, (SELECT run_id FROM runs WHERE thread_id = $1 LIMIT 1), 'fill-' || i,
			jsonb_build_object('id', 'fill-' || i, 'role', 'user', 'content', repeat('x', $2 - 1 -
				octet_length(jsonb_build_object('id', 'fill-' || i, 'role', 'user', 'content', '')::text))), 'caller'
		FROM generate_series(1, 6) i ORDER BY i`, thread, half); err != nil {
		t.Fatal(err)
	}
	var sizes []int
	if err := h.DB().QueryRow(context.Background(), `SELECT array_agg(octet_length(message::text) + 1 ORDER BY id)
		FROM thread_messages WHERE thread_id = $1 AND message_id LIKE 'fill-%'`, thread).Scan(&sizes); err != nil {
		t.Fatal(err)
	}
	for _, n := range sizes {
		if n != half {
			t.Fatalf("stored sizes with commas %v, want each %d", sizes, half)
		}
	}
	pages := readAllPages(t, func(q string) snapPage { return getSnap(t, srv.URL+"/threads/"+thread+q, nil) })
	if got, want := inOrder(pages), threadMessageIDs(t, h, thread); !slices.Equal(got, want) {
		t.Fatalf("paged %v, the thread holds %v", got, want)
	}
	for i, want := range [][]string{{"fill-5", "fill-6"}, {"fill-3", "fill-4"}, {"fill-1", "fill-2"}} {
		if !slices.Equal(pages[i].IDs, want) {
			t.Fatalf("page %d holds %v, want %v (a full page of exactly the bound)", i+1, pages[i].IDs, want)
		}
	}
}

// Retention deleting a thread while a caller pages it back: the next page,
// cursor and all, is exactly what an unknown id gets, not a 400 about the
// cursor nor a 500.
func TestCursorWalkOfAThreadRetentionDeleted(t *testing.T) {
	h, _, srv, thread := echoThread(t, 0xe8)
	growThread(t, h, thread, 5, 10)
	first := getSnap(t, srv.URL+"/threads/"+thread+"?limit=2", nil)
	if first.Status != 200 || !first.More {
		t.Fatalf("the first page: %d %s", first.Status, first.Body)
	}
	p, err := h.Store.PruneBatch(context.Background(), time.Now().Add(time.Second), 100)
	if err != nil || p.Threads != 1 {
		t.Fatalf("prune: %+v, %v", p, err)
	}
	unknownID := "thread_000000000000000000000000"
	q := "?limit=2&before=" + url.QueryEscape(first.Before)
	got := getExact(t, srv.URL+"/threads/"+thread+q, nil)
	got.Body = strings.ReplaceAll(got.Body, thread, unknownID)
	if want := getExact(t, srv.URL+"/threads/"+unknownID+q, nil); got != want || got.Status != 404 {
		t.Fatalf("the next page of a deleted thread: %+v, an unknown id's: %+v", got, want)
	}
}
