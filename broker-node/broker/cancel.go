package broker

import (
	"context"

	"github.com/funduq/funduq-go/core/run"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/core/wire"
)

func (l *lane) onCancel(ctx context.Context) {
	b := l.b
	b.mu.Lock()
	l.cancelRequested = true
	claimed, orphan, status := l.claimedBy != nil, l.orphan, l.status
	b.mu.Unlock()
	switch {
	case orphan:
		// Sent again once its provider re-adopts it.
	case !claimed:
		l.conclude(ctx, roundWrite{end: &store.Conclusion{Move: store.Move{To: run.Cancelled}}})
	case status == run.Running:
		if l.move(ctx, run.Cancelling) == nil {
			l.sendCancel(ctx)
		}
	case status == run.Cancelling:
		l.sendCancel(ctx)
	}
}

func (l *lane) sendCancel(ctx context.Context) {
	b := l.b
	b.mu.Lock()
	ls := l.claimedBy
	b.mu.Unlock()
	if ls == nil || l.cancelSent == ls {
		return
	}
	frame, _ := wire.Marshal(wire.Cancel{Type: wire.TypeCancel, RunID: l.id})
	if err := ls.link.Send(frame); err != nil {
		l.log.WarnContext(ctx, "cancel could not be sent", "err", err)
		return
	}
	l.cancelSent = ls
	l.log.InfoContext(ctx, "cancel passed on to the provider", l.keyAttr(ls.key)...)
}
