package main

import "testing"

// Every line a door logs about a run names its run, thread and provider
// (design.md §Logs: run_id, thread_id, provider_key), so an operator
// finds a run's trouble by any of the three: the tail's failed live feed
// and the caller hanging up named the run alone, or the run and thread.
func TestLambdaRunLinesNameTheRun(t *testing.T) {
	recs, providerKey, raw := streamWithoutRedis(t)
	var runID, threadID string
	for _, rec := range recs {
		if rec["msg"] == "run queued" {
			runID, _ = rec["run_id"].(string)
			threadID, _ = rec["thread_id"].(string)
		}
	}
	if runID == "" || threadID == "" {
		t.Fatalf("no run queued with its run and thread:\n%s", raw)
	}
	for _, msg := range []string{"tail: live feed failed; polling PostgreSQL", "caller went away"} {
		found := false
		for _, rec := range recs {
			if rec["msg"] != msg {
				continue
			}
			found = true
			if rec["run_id"] != runID || rec["thread_id"] != threadID || rec["provider_key"] != providerKey {
				t.Errorf("%q names run %v, thread %v, provider %v; want %s, %s, %s",
					msg, rec["run_id"], rec["thread_id"], rec["provider_key"], runID, threadID, providerKey)
			}
		}
		if !found {
			t.Errorf("no %q line:\n%s", msg, raw)
		}
	}
}
