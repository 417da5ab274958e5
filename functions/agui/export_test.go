package agui

// SetAfterRetryLookup sets the barrier an answer passes after its retry
// look-up found nothing (afterRetryLookup) and returns its undoing.
func SetAfterRetryLookup(f func()) (restore func()) {
	afterRetryLookup.Store(&f)
	return func() { afterRetryLookup.Store(nil) }
}
