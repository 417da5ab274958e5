// Package wire holds the provider link's envelopes as the reference gateway's
// wire v4 spells them: the DeliveredRun inside a "run" frame and the
// DeliveredCompletion inside a "completionRequest" frame. Envelopes are flat
// and strict — exactly their keys, nulls kept — because a strict provider
// refuses a frame with a key missing or a key it does not know.
package wire
