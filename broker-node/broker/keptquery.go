package broker

// KeptForRegister reports whether reports l sent before its register are
// kept for it in some run's lane (keep.go); when not, changed is closed
// the next time any link gets reports kept. A query read after kept
// reports is answered only once they are taken or refused, which is at the
// register at the earliest: a link whose every query place is taken by
// such queries would never have its register read, so its next query is
// answered at once instead of waiting for a place (link.Server,
// design.md §The provider wire, "After the handshake").
func (b *Broker) KeptForRegister(l Link) (kept bool, changed <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ls := b.links[l]
	if ls == nil {
		return false, nil
	}
	if len(b.keptOn[ls]) > 0 {
		return true, nil
	}
	if b.keptBell == nil {
		b.keptBell = make(chan struct{})
	}
	return false, b.keptBell
}
