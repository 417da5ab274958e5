package broker

import (
	"sort"

	"github.com/funduq/funduq-go/core/wire"
)

// nameNotice is an error frame naming one agent, for one link: a name
// another link of its key took (wire.TakenMessage), or one no link of its
// key serves any more after such a take (wire.FreedMessage). design.md §Two
// processes of one key: an older process that re-registered its whole
// roster after its link dropped took back what a newer one had taken,
// leaving the newer serving nothing, replaced and stopped for good. Told
// which names were taken, a provider leaves them out of its next register;
// told one is free again, it may take it back.
type nameNotice struct {
	to   *linkState
	name string
	msg  string
}

// takenLocked records that ls's register took names from old, a link of the
// same key that still serves other agents (one left serving nothing is
// replaced instead), and returns the notices telling old so. Each name is
// marked displaced until it is served by no link (freedLocked). Caller
// holds b.mu.
func (b *Broker) takenLocked(old *linkState, names []string) []nameNotice {
	sort.Strings(names)
	out := make([]nameNotice, 0, len(names))
	for _, n := range names {
		b.displaced[AgentRef{old.key, n}] = true
		out = append(out, nameNotice{old, n, wire.TakenMessage})
	}
	return out
}

// freedLocked is called with names of key that by (closing, dropping or
// deleting them) has just left served by no link. Each of them that was
// taken from another link of the key (displaced) is announced free to every
// other registered link of the key: the link it was taken from may have
// been replaced by its own process's next link since, which never declared
// the name to funduq (our SDK left it out), so the notice goes to all of
// them and a link that does not declare the name ignores it. A name never
// taken is announced to nobody, so a key splitting different agents across
// processes hears nothing new. Caller holds b.mu.
func (b *Broker) freedLocked(key string, by *linkState, names []string) []nameNotice {
	var freed []string
	for _, n := range names {
		ref := AgentRef{key, n}
		if b.displaced[ref] && b.served[ref] == nil {
			delete(b.displaced, ref)
			freed = append(freed, n)
		}
	}
	if len(freed) == 0 {
		return nil
	}
	sort.Strings(freed)
	var out []nameNotice
	for _, ls := range b.links {
		if ls == by || ls.key != key || ls.replaced || ls.withdrawn || len(ls.names) == 0 {
			continue
		}
		for _, n := range freed {
			out = append(out, nameNotice{ls, n, wire.FreedMessage})
		}
	}
	return out
}

// sendNotices writes each notice on its link. Called without b.mu: Send
// only queues, but a closed link's refusal needs no lock either.
func sendNotices(ns []nameNotice) {
	for _, n := range ns {
		frame, err := wire.Marshal(wire.Error{Type: wire.TypeError, Message: n.msg, Name: n.name})
		if err != nil {
			continue
		}
		_ = n.to.link.Send(frame) // a closed link has nobody to tell
	}
}
