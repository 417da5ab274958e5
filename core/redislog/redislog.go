// Package redislog puts go-redis's own messages (a pool that cannot dial,
// a connection it discards) into funduq's JSON log as WARN lines "redis
// client" with the text under "detail". Left to go-redis they are plain
// text on the process's stderr ("redis: 2026/12/07 … pool.go:770: …"),
// between the JSON lines, where a reader parsing JSON drops or chokes on
// them (design.md §Logs). The broker node, the local doors server and the
// doors' Lambda entries set it.
package redislog

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"
)

// Logger is go-redis's logger writing to a slog.Logger.
type Logger struct{ log *slog.Logger }

// New is a Logger writing to log (nil: nowhere).
func New(log *slog.Logger) Logger {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return Logger{log}
}

// Printf logs one of go-redis's messages as a WARN line "redis client".
func (l Logger) Printf(ctx context.Context, format string, v ...any) {
	l.log.WarnContext(ctx, "redis client", "detail", fmt.Sprintf(format, v...))
}

// Use makes log go-redis's logger. The setting is go-redis's, for the
// whole process: the last call wins.
func Use(log *slog.Logger) { redis.SetLogger(New(log)) }
