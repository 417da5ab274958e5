package node

import (
	"context"
	"sync"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// notifyReady tells systemd the node serves (READY=1, for a Type=notify
// unit) and, when the unit has WatchdogSec=, starts pinging its watchdog
// on wg until ctx ends. Without NOTIFY_SOCKET — any run not under
// systemd — it does nothing. NOTIFY_SOCKET, WATCHDOG_USEC and
// WATCHDOG_PID are the service manager's protocol (sd_notify(3)), read
// where it is spoken, not funduq's configuration (design.md D14).
func (n *Node) notifyReady(ctx context.Context, wg *sync.WaitGroup) {
	if !n.sdNotify(daemon.SdNotifyReady) {
		return
	}
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		n.log.Error("systemd's watchdog interval is unreadable; not pinging it, so systemd will restart the node", "err", err)
		return
	}
	if interval <= 0 {
		return
	}
	n.log.Info("pinging systemd's watchdog while the lease loop makes progress", "watchdog", interval.String())
	wg.Go(func() { n.watchdog(ctx, interval/2) })
}

// notifyStopping tells systemd the node has begun to stop (STOPPING=1).
func (n *Node) notifyStopping() { n.sdNotify(daemon.SdNotifyStopping) }

// watchdog pings systemd's watchdog (WATCHDOG=1) every interval — half the
// unit's WatchdogSec, as sd_watchdog_enabled(3) advises — while the lease
// elector's loop makes progress by the check /livez makes
// (lease.Elector.Check). Once the loop is stuck it pings no more, and
// systemd restarts the node a WatchdogSec after the last ping (design.md
// §A stuck lease loop): nothing else would, as the unit restarts only a
// process that exits and the Auto Scaling group checks EC2 status. It
// returns when ctx ends. Each wait is a timer of its own on the watchdog's
// clock, so a test's fake clock sees one waiter exactly while it waits.
func (n *Node) watchdog(ctx context.Context, interval time.Duration) {
	stuck := false
	for {
		t := n.watchdogClock.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.Chan():
		}
		if err := n.elector.Check(n.watchdogClock.Now()); err != nil {
			if !stuck {
				n.log.Error("the lease loop is stuck: no more watchdog pings, so systemd restarts this node", "err", err)
			}
			stuck = true
			continue
		}
		if stuck {
			n.log.Info("the lease loop makes progress again: pinging systemd's watchdog again")
		}
		stuck = false
		n.sdNotify(daemon.SdNotifyWatchdog)
	}
}

// sdNotify sends state to systemd and reports whether it was sent: false
// without NOTIFY_SOCKET, or when the send failed (logged).
func (n *Node) sdNotify(state string) bool {
	sent, err := daemon.SdNotify(false, state)
	if err != nil {
		n.log.Warn("could not notify systemd", "state", state, "err", err)
	}
	return sent
}
