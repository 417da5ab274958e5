package scripts

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// The project-local PostgreSQL and Redis that dev-up and the test command
// start listen on ports the kernel never hands an outgoing connection.
// Inside that range, any client socket on the machine may hold the port
// (nothing listening, so nothing to see in `ss -ltn`), and the server
// fails to start "Address already in use": scripts/dev-up stopped with
// "PostgreSQL did not start" on a busy machine whose tests had taken
// 127.0.0.1:55432 for a connection of their own.
func TestDevPortsAreOutsideTheEphemeralRange(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Skipf("no Linux ephemeral port range to compare with: %v", err)
	}
	var lo, hi int
	if _, err := fmt.Sscan(string(b), &lo, &hi); err != nil {
		t.Fatalf("ip_local_port_range %q: %v", b, err)
	}
	cmd := exec.Command("bash", "-c", `source lib/services.sh && funduq_init_state && echo "$FUNDUQ_DEV_PG_PORT $FUNDUQ_DEV_REDIS_PORT"`)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "FUNDUQ_STATE_DIR=" + t.TempDir()}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("reading the defaults: %v\n%s", err, out)
	}
	var pg, redis int
	if _, err := fmt.Sscan(strings.TrimSpace(string(out)), &pg, &redis); err != nil {
		t.Fatalf("defaults %q: %v", out, err)
	}
	for name, port := range map[string]int{"FUNDUQ_DEV_PG_PORT": pg, "FUNDUQ_DEV_REDIS_PORT": redis} {
		if port >= lo && port <= hi {
			t.Errorf("%s defaults to %d, inside the ephemeral port range %d-%d: an outgoing connection may hold it", name, port, lo, hi)
		}
	}
}
