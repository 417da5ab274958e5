// Package a2a is the A2A door: JSON-RPC at POST /a2a/{provider}/{name} and
// the agent card beside it, over the same core as the AG-UI door. The
// handler arrives with the A2A door issue; until then this package holds
// only this description.
package a2a
