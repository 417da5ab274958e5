// Package kyok is the KYOK completion door: POST /kyok/v1/chat/completions,
// an OpenAI-compatible endpoint an agent calls with its run's KYOK token,
// relayed to the caller's own LLM provider through the broker. The handler
// arrives with the KYOK issue; until then this package holds only this
// description.
package kyok
