package broker

// endedRuns remembers the last runs this broker saw reach a terminal
// status, so a late read of one as queued — a catch-up query or a notice
// processed after its lane already ran it to the end — opens no lane. A
// terminal run never runs again, so remembering it can only be right; the
// bound keeps it small (the lane's own first write, refused for a settled
// run, covers what has been forgotten here).
type endedRuns struct {
	ids  map[string]struct{}
	ring []string
	next int
}

const endedRunsKept = 4096

func newEndedRuns() *endedRuns {
	return &endedRuns{ids: make(map[string]struct{}, endedRunsKept), ring: make([]string, endedRunsKept)}
}

func (e *endedRuns) add(id string) {
	if _, ok := e.ids[id]; ok {
		return
	}
	if old := e.ring[e.next]; old != "" {
		delete(e.ids, old)
	}
	e.ring[e.next] = id
	e.ids[id] = struct{}{}
	e.next = (e.next + 1) % len(e.ring)
}

func (e *endedRuns) has(id string) bool {
	_, ok := e.ids[id]
	return ok
}
