package a2a

// BeforeSnapshot makes f run as each stream is about to read its opening
// snapshot (Options.beforeSnapshot).
func BeforeSnapshot(o *Options, f func()) { o.beforeSnapshot = f }
