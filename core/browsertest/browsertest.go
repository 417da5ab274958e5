// Package browsertest drives a real headless Chromium for tests, through the
// DevTools protocol (chromedp). It is for tests only: it reads the test
// environment. The browser is FUNDUQ_TEST_CHROMIUM (scripts/test installs
// Debian's chromium and sets it), else chromium on PATH; when there is none
// the test skips — or fails under CI=true, because a skipped browser test is
// not a passing one.
//
// Every browser starts with a fresh profile and with its background
// networking off (no update, sync or safe-browsing calls out of a closed
// network).
package browsertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Guard bounds every wait: a hang detector, never a timing assertion.
const Guard = 20 * time.Second

// Path finds the browser, or skips (fails under CI=true) the test.
func Path(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("FUNDUQ_TEST_CHROMIUM"); p != "" {
		if _, err := os.Stat(p); err == nil {
			return p
		}
		missing(t, fmt.Sprintf("FUNDUQ_TEST_CHROMIUM=%s does not exist", p))
	}
	for _, name := range []string{"chromium", "chromium-browser", "/usr/bin/chromium"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	missing(t, "no chromium on PATH")
	return ""
}

func missing(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("a headless Chromium is required under CI=true: %s (scripts/test installs Debian's chromium)", why)
	}
	t.Skipf("%s: run the tests with scripts/test, which installs Debian's chromium", why)
}

// Browser is one headless Chromium with one tab.
type Browser struct {
	t   testing.TB
	Ctx context.Context // the tab: pass it to chromedp.Run

	mu     sync.Mutex
	logs   []string
	parent *Browser // the browser a tab (NewTab) logs to
}

// New starts a browser for t; it is closed when t ends.
func New(t testing.TB) *Browser {
	t.Helper()
	path := Path(t)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("mute-audio", true),
		chromedp.Flag("metrics-recording-only", true),
		chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	b := &Browser{t: t}
	tctx, cancelTab := chromedp.NewContext(actx, chromedp.WithLogf(func(f string, a ...any) { b.log("chromedp: "+f, a...) }))
	// The first Run starts the browser and lives as long as tctx: no timeout on it.
	if err := chromedp.Do(tctx); err != nil {
		cancelTab()
		cancelAlloc()
		t.Fatalf("starting %s: %v", path, err)
	}
	stopConsole := b.logConsole(tctx)
	b.Ctx = tctx
	t.Cleanup(func() {
		stopConsole()
		cancelTab()
		cancelAlloc()
		if t.Failed() {
			b.mu.Lock()
			for _, l := range b.logs {
				t.Log("browser: " + l)
			}
			b.mu.Unlock()
		}
	})
	return b
}

// logConsole logs the console messages of the tab tctx into b's log until
// the returned stop is called (it waits for the reader to end).
func (b *Browser) logConsole(tctx context.Context) (stop func()) {
	lctx, cancel := context.WithCancel(tctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range chromedp.Console(lctx) {
			if err != nil {
				return
			}
			b.log("console %s: %s", m.Type, m.Text)
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// NewTab opens another tab of the same browser (one profile: the tabs
// share cookies and localStorage, as two tabs of one user do); it closes
// when the test ends. Its console messages are logged with b's.
func (b *Browser) NewTab() *Browser {
	b.t.Helper()
	tab := &Browser{t: b.t}
	tctx, cancel := chromedp.NewContext(b.Ctx)
	if err := chromedp.Do(tctx); err != nil {
		cancel()
		b.t.Fatalf("opening a tab: %v", err)
	}
	stopConsole := b.logConsole(tctx)
	tab.Ctx = tctx
	b.t.Cleanup(func() {
		stopConsole()
		cancel()
	})
	tab.parent = b
	return tab
}

func (b *Browser) log(format string, args ...any) {
	if b.parent != nil {
		b.parent.log(format, args...)
		return
	}
	b.mu.Lock()
	b.logs = append(b.logs, fmt.Sprintf(format, args...))
	b.mu.Unlock()
}

// Logs are the page's console messages and exceptions so far.
func (b *Browser) Logs() []string {
	if b.parent != nil {
		return b.parent.Logs()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.logs...)
}

// Run runs actions in the tab, each bounded by Guard; it fails the test on error.
func (b *Browser) Run(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, Guard)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// Eval evaluates a JavaScript expression and returns its value.
func Eval[T any](b *Browser, js string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, Guard)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// Eventually polls a JavaScript boolean expression until it is true.
func (b *Browser) Eventually(what, js string) {
	b.t.Helper()
	deadline := time.Now().Add(Guard)
	for {
		ctx, cancel := context.WithTimeout(b.Ctx, Guard)
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool]("Boolean("+js+")"))
		cancel()
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			ctx, cancel := context.WithTimeout(b.Ctx, 5*time.Second)
			body, _ := chromedp.Run(ctx, chromedp.Evaluate[string]("document.body ? document.body.innerText : ''"))
			cancel()
			b.t.Fatalf("gave up waiting: %s (last error %v)\npage text:\n%s", what, err, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Screenshot saves a full-page PNG as name in FUNDUQ_TEST_SCREENSHOTS (a
// folder) when that is set; otherwise it does nothing.
func (b *Browser) Screenshot(name string) {
	b.t.Helper()
	dir := os.Getenv("FUNDUQ_TEST_SCREENSHOTS")
	if dir == "" {
		return
	}
	ctx, cancel := context.WithTimeout(b.Ctx, Guard)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// CheckClean fails the test when the page threw an uncaught exception or
// the browser refused something under the Content-Security-Policy.
func (b *Browser) CheckClean() {
	b.t.Helper()
	for _, l := range b.Logs() {
		if strings.HasPrefix(l, "console exception:") || strings.Contains(l, "Content Security Policy") {
			b.t.Errorf("browser: %s", l)
		}
	}
}
