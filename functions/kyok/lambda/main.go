// Command lambda is the KYOK door's AWS Lambda entry: the kyok.Handler
// served through a Function URL with response streaming (lambdaurl), so a
// streamed completion reaches the agent chunk by chunk. Configuration is
// read once here (config.ParseDoor).
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambdaurl"
	"github.com/redis/go-redis/v9"

	"github.com/funduq/funduq-go/core/config"
	"github.com/funduq/funduq-go/core/store"
	"github.com/funduq/funduq-go/functions/kyok"
)

func main() {
	cfg, err := config.ParseDoor(config.FromList(os.Environ()))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	st, err := store.Open(ctx, cfg.DatabaseURL, store.Options{MaxConns: 2, Log: log})
	cancel()
	if err != nil {
		log.Error("kyok door: database", "err", err)
		os.Exit(1)
	}
	defer st.Close()
	ropt, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		log.Error("kyok door: FUNDUQ_REDIS_URL", "err", err)
		os.Exit(1)
	}
	rdb := redis.NewClient(ropt)
	defer rdb.Close()
	h, err := kyok.New(kyok.Options{Store: st, Redis: rdb, Prefix: cfg.RedisPrefix, TokenSecret: []byte(cfg.TokenSecret), Log: log})
	if err != nil {
		log.Error("kyok door: start", "err", err)
		os.Exit(1)
	}
	lambdaurl.Start(h)
}
