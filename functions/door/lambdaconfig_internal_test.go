package door

import (
	"strings"
	"testing"
)

// A Lambda door's configuration error names the program, as the broker
// node's do ("broker-node: configuration: …"). (On main: "configuration:
// FUNDUQ_DATABASE_URL: required and not set; …", naming no program.)
func TestLambdaConfigErrorNamesTheDoor(t *testing.T) {
	_, err := lambdaConfig("agui", []string{"FUNDUQ_REDIS_URL=redis://x"})
	if err == nil || !strings.HasPrefix(err.Error(), "agui door: configuration: ") {
		t.Fatalf("%v; want \"agui door: configuration: …\"", err)
	}
}
