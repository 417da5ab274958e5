// Package config holds each binary's settings (design.md D14) as types, and
// parses them from an environment that the binary hands in. Core code never
// reads the process environment itself: a binary calls, at its edge,
// config.ParseBroker(config.FromList(os.Environ()), …) — or a test passes a map — and hands
// the result down. Every error names the variable at fault.
package config
