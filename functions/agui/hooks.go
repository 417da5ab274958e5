package agui

import "sync/atomic"

// afterRetryLookup, when set, runs after an answer's retry look-up found
// nothing and before the paused run is looked up: a test's barrier to let
// the request's first attempt reopen the run in that gap (nil outside
// tests; set through export_test.go).
var afterRetryLookup atomic.Pointer[func()]

// reopenHeld, when set, is told how many bytes of stored opening events a
// resume's reading of the run (openAt) held at most at once: a test's
// window on the memory a resume costs (nil outside tests; set through
// export_test.go).
var reopenHeld atomic.Pointer[func(bytes int)]
