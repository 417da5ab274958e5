package main

import (
	"context"
	"strings"
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/core/redistest"
	"github.com/funduq/funduq-go/core/store/storetest"
)

// An address the doors cannot listen on names its setting, as a broker
// node's does ("listen on bad (FUNDUQ_HTTP_ADDR): …"): the doors said only
// "doors: listen" with the address, leaving the newcomer to find where it
// came from.
func TestDoorsNameTheirListenSetting(t *testing.T) {
	environ := []string{
		"FUNDUQ_DATABASE_URL=" + storetest.URL(t), "FUNDUQ_REDIS_URL=" + redistest.URL(),
		"FUNDUQ_IDENTITY_KEY=" + nodetest.SeedHex(0xbc), "FUNDUQ_TOKEN_SECRET=" + nodetest.TokenSecret,
		"FUNDUQ_DOORS_ADDR=bad",
	}
	var errb lockedBuffer
	if code := run(context.Background(), environ, &errb, nil); code != 1 || !strings.Contains(errb.String(), "FUNDUQ_DOORS_ADDR") ||
		!strings.Contains(errb.String(), "missing port in address") {
		t.Fatalf("exit %d, stderr %q; want exit 1 naming FUNDUQ_DOORS_ADDR and the reason", code, errb.String())
	}
}
