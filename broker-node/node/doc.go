// Package node assembles a broker node: its HTTP listener (POST /tickets,
// GET /ws/provider, /livez, /readyz, /metrics), its connections to
// PostgreSQL and Redis, and the leadership loop under which the broker, its
// sweep and its intake listener run. Under systemd it says when it is
// ready and when it stops, and pings the unit's watchdog while that loop
// makes progress (notify.go).
package node
