package node_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/provider"
)

type configBroker = config.Broker

func io_Copy(b *strings.Builder, resp *http.Response) (int64, error) {
	defer resp.Body.Close()
	return io.Copy(b, resp.Body)
}

// runSDK runs an SDK client until the returned stop is called, and returns
// once the client is connected and registered.
func runSDK(client *provider.Client) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = client.Run(ctx) }()
	<-client.Ready()
	return func() { cancel(); wg.Wait() }
}
