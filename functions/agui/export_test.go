package agui

// SetAfterRetryLookup sets the barrier an answer passes after its retry
// look-up found nothing (afterRetryLookup) and returns its undoing.
func SetAfterRetryLookup(f func()) (restore func()) {
	afterRetryLookup.Store(&f)
	return func() { afterRetryLookup.Store(nil) }
}

// SetReopenHeld sets the hook told the bytes a resume's reading of the
// run held at most (reopenHeld) and returns its undoing.
func SetReopenHeld(f func(bytes int)) (restore func()) {
	reopenHeld.Store(&f)
	return func() { reopenHeld.Store(nil) }
}
