package console

import (
	"net/http"
	"testing"
)

// Who guesses: X-Forwarded-For is believed only from a peer on a private
// or loopback address — the load balancer in the node's VPC, or a local
// proxy. A stranger reaching a node's public address directly names itself
// anew in that header on every request, and would never run out of
// guesses; it is counted by its own address.
func TestGuessingClient(t *testing.T) {
	for _, c := range []struct {
		peer, xff, want string
	}{
		{"10.0.3.7:41234", "203.0.113.1, 198.51.100.9", "198.51.100.9"},   // the load balancer
		{"127.0.0.1:5000", "198.51.100.9", "198.51.100.9"},                // a local proxy
		{"[fd00::1]:443", "2001:db8:1:2:3::4", "2001:db8:1:2::/64"},       // a private IPv6 peer
		{"198.51.100.77:5000", "203.0.113.1, 192.0.2.5", "198.51.100.77"}, // a stranger, directly
		{"[2001:db8:9:9::1]:443", "192.0.2.5", "2001:db8:9:9::/64"},       // a stranger over IPv6
		{"10.0.3.7:41234", "not-an-address", "10.0.3.7"},                  // nothing to believe
		{"10.0.3.7:41234", "", "10.0.3.7"},
	} {
		r, _ := http.NewRequest("GET", "/console/api/state", nil)
		r.RemoteAddr = c.peer
		if c.xff != "" {
			r.Header.Set("X-Forwarded-For", c.xff)
		}
		if got := client(r); got != c.want {
			t.Errorf("peer %s, X-Forwarded-For %q: client %q, want %q", c.peer, c.xff, got, c.want)
		}
	}
}
