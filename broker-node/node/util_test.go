package node_test

import (
	"io"
	"net/http"
	"strings"

	"github.com/funduq/funduq-go/core/config"
)

type configBroker = config.Broker

func io_Copy(b *strings.Builder, resp *http.Response) (int64, error) {
	defer resp.Body.Close()
	return io.Copy(b, resp.Body)
}
