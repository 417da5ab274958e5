// Package agui is funduq's reading of the AG-UI event stream a provider
// relays: it names the event types, validates each event against the AG-UI
// schema for the types funduq knows (an unknown string type is a newer
// AG-UI's event and passes untouched; an event without a string type is
// malformed), reports what the broker watches for (RUN_FINISHED with or
// without an interrupt outcome, RUN_ERROR), folds a finished run's events
// into the AG-UI messages appended to its thread, derives the run's open
// asks, and shapes the JSON funduq itself emits (its synthesized RUN_ERROR,
// events relayed with null-valued keys dropped). It works on raw JSON only
// and keeps no state between calls.
package agui
