package node

import (
	"net/http"
	"time"
)

// livez is the node's liveness: 200 while its lease elector's loop makes
// progress, 503 naming the stuck loop when it does not
// (lease.Elector.Check), so a supervisor restarts a node whose loop is
// blocked while it still believes it leads (design.md §Failure, the
// lease); under systemd the watchdog pings stop on the same check
// (notify.go). It reads no store: a store down is /readyz's business, and a
// node restarted for it would come back to the same store. /readyz, the
// load balancer's check, is unchanged: a standby is alive and not ready.
func (n *Node) livez(w http.ResponseWriter, _ *http.Request) {
	n.livezAt(w, time.Now())
}

func (n *Node) livezAt(w http.ResponseWriter, now time.Time) {
	if err := n.elector.Check(now); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "stuck", "lease": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "alive"})
}
