package agui

// SchemaTypes lists the event types Validate knows, for the tests that check
// every one of them is covered.
func SchemaTypes() []string {
	out := make([]string, 0, len(schemas))
	for t := range schemas {
		out = append(out, t)
	}
	return out
}
