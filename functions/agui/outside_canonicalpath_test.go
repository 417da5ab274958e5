package agui_test

import (
	"testing"

	"github.com/funduq/funduq-go/broker-node/nodetest"
	"github.com/funduq/funduq-go/internal/routetest"
)

// Every answer of the door is its error envelope (D13), as the door
// behind a Lambda serves it: a path not in its clean form ("//", "/./",
// "/../") is an unknown route, not net/http's redirect with an HTML body
// (a POST's 307 re-sent elsewhere), and a route served for one method
// answers another 405 with Allow, as every route of the door does.
func TestOutsideOddPathsAnswerTheEnvelope(t *testing.T) {
	h := nodetest.Start(t, nil)
	p := h.Connect(0xe1, nil)
	p.Register("echo")
	srv := startDoor(t, h, nil)
	routetest.Check(t, srv.URL, input("t", "r", ""), []routetest.Route{
		routetest.NotFound("GET", "/runs//events"),
		routetest.NotFound("GET", "/threads/a/../thread_x"),
		routetest.NotFound("POST", "/agui/"+p.Key+"/./echo"),
		routetest.NotFound("POST", "/agui//"+p.Key+"/echo"),
		routetest.NotAllowed("POST", "/agents", "GET"),
		routetest.NotAllowed("DELETE", "/agents", "GET"),
	})
}
