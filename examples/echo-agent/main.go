// Command echo-agent is the smallest funduq agent provider: it serves one
// agent that answers every run with "echo: " and the last user message.
//
// Settings come from the environment:
//
//	FUNDUQ_BROKER_URL           broker node URL (default http://127.0.0.1:8700)
//	FUNDUQ_AGENT_KEY_FILE       file holding the 32-byte Ed25519 seed as 64 hex chars
//	                            (default ./echo-agent.key; created with mode 0600 when absent)
//	FUNDUQ_PUBLIC_KEY           optional pin of funduq's public key (64 hex)
//	FUNDUQ_AGENT_NAME           agent name (default "echo")
//	FUNDUQ_MAX_CONCURRENT_RUNS  declared capacity (default: unlimited)
//
// It logs JSON to stderr, prints its public key and fingerprint at start and
// stops cleanly on SIGINT or SIGTERM.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/funduq/funduq-go/core/identity"
	"github.com/funduq/funduq-go/provider"
)

// settings is what the environment configures.
type settings struct {
	BrokerURL         string
	KeyFile           string
	FunduqKey         string
	AgentName         string
	MaxConcurrentRuns *int
}

// settingsFromEnv reads the settings through getenv (os.Getenv at main).
func settingsFromEnv(getenv func(string) string) (settings, error) {
	s := settings{
		BrokerURL: getenv("FUNDUQ_BROKER_URL"),
		KeyFile:   getenv("FUNDUQ_AGENT_KEY_FILE"),
		FunduqKey: strings.TrimSpace(getenv("FUNDUQ_PUBLIC_KEY")),
		AgentName: getenv("FUNDUQ_AGENT_NAME"),
	}
	if s.BrokerURL == "" {
		s.BrokerURL = "http://127.0.0.1:8700"
	}
	if err := checkBrokerURL(s.BrokerURL); err != nil {
		return s, err
	}
	if s.KeyFile == "" {
		s.KeyFile = "./echo-agent.key"
	}
	if s.AgentName == "" {
		s.AgentName = "echo"
	}
	if s.FunduqKey != "" && !identity.IsPublicKeyHex(s.FunduqKey) {
		return s, errors.New("FUNDUQ_PUBLIC_KEY must be 64 lowercase hex chars")
	}
	if raw := strings.TrimSpace(getenv("FUNDUQ_MAX_CONCURRENT_RUNS")); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 {
			return s, fmt.Errorf("FUNDUQ_MAX_CONCURRENT_RUNS must be a positive integer (unset for unlimited), got %q", raw)
		}
		s.MaxConcurrentRuns = &n
	}
	return s, nil
}

// checkBrokerURL refuses a FUNDUQ_BROKER_URL the provider library would
// refuse, naming the setting the user set and what is wrong: the
// library's own words name its Config.BaseURL, a field the user of this
// example never wrote. The errors do not repeat a password it may hold.
func checkBrokerURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("FUNDUQ_BROKER_URL does not parse as a URL: %w (want the broker node's http(s) URL with a host, e.g. http://127.0.0.1:8700)", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("FUNDUQ_BROKER_URL must be an http(s) URL with a host (e.g. http://127.0.0.1:8700), got %q", u.Redacted())
	}
	if u.User != nil {
		return fmt.Errorf("FUNDUQ_BROKER_URL must not carry a user name or password (%s): the agent cannot connect through one", u.Redacted())
	}
	return nil
}

// loadOrCreateKey reads the seed in path, or creates the file (mode 0600)
// with a fresh random seed when it does not exist. created reports which.
func loadOrCreateKey(path string) (signer *identity.Signer, created bool, err error) {
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		signer, err = identity.NewSignerFromSeedHex(strings.TrimSpace(string(b)))
		if err != nil {
			return nil, false, fmt.Errorf("key file %s: %w", path, err)
		}
		return signer, false, nil
	case !errors.Is(err, fs.ErrNotExist):
		return nil, false, fmt.Errorf("key file: %w", err)
	}
	seed := make([]byte, 32)
	if _, err := io.ReadFull(rand.Reader, seed); err != nil {
		return nil, false, err
	}
	seedHex := hex.EncodeToString(seed)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, false, fmt.Errorf("creating key file: %w", err)
	}
	if _, err := f.WriteString(seedHex + "\n"); err != nil {
		f.Close()
		return nil, false, fmt.Errorf("writing key file: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, false, fmt.Errorf("writing key file: %w", err)
	}
	signer, err = identity.NewSignerFromSeedHex(seedHex)
	return signer, true, err
}

// reply is the echo agent's answer to a run.
func reply(run *provider.Run) string { return "echo: " + run.LastUserText() }

// echo is the agent's handler: RUN_STARTED, one text message, RUN_FINISHED.
func echo(ctx context.Context, run *provider.Run) error {
	if err := run.Emit(ctx, map[string]any{"type": "RUN_STARTED", "threadId": run.ThreadID, "runId": run.ID}); err != nil {
		return err
	}
	if err := run.EmitText(ctx, run.ID+"-reply", reply(run)); err != nil {
		return err
	}
	return run.Emit(ctx, map[string]any{"type": "RUN_FINISHED", "threadId": run.ThreadID, "runId": run.ID})
}

func main() {
	if code, done := commandLine(os.Args[1:], os.Stdout, os.Stderr); done {
		os.Exit(code)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is main with its inputs explicit: it serves until ctx ends and
// returns the exit code.
func run(ctx context.Context, getenv func(string) string, stdout, stderr io.Writer) int {
	logger := slog.New(slog.NewJSONHandler(stderr, nil))
	s, err := settingsFromEnv(getenv)
	if err != nil {
		logger.Error("bad settings", "err", err)
		return 2
	}
	signer, created, err := loadOrCreateKey(s.KeyFile)
	if err != nil {
		logger.Error("loading the agent key", "err", err)
		return 1
	}
	fingerprint := identity.Fingerprint(signer.PublicKey())
	fmt.Fprintf(stdout, "public key:  %s\nfingerprint: %s\n", signer.PublicKeyHex(), fingerprint)
	logger.Info("echo-agent identity", "provider_key", signer.PublicKeyHex(), "fingerprint", fingerprint,
		"key_file", s.KeyFile, "created", created)

	client, err := provider.New(provider.Config{
		BaseURL:           s.BrokerURL,
		Signer:            signer,
		FunduqKey:         s.FunduqKey,
		MaxConcurrentRuns: s.MaxConcurrentRuns,
		ProviderName:      "echo-agent",
		Agents: []provider.Agent{{
			Name:        s.AgentName,
			Description: "Answers every message with the same text, prefixed with \"echo: \".",
			Handler:     echo,
		}},
		Logger: logger,
	})
	if err != nil {
		logger.Error("bad provider config", "err", err)
		return 2
	}
	logger.Info("echo-agent starting", "broker", s.BrokerURL, "agent", s.AgentName)
	if err := client.Run(ctx); err != nil {
		if errors.Is(err, provider.ErrReplaced) {
			// A newer process of this key serves the agent now (a rolling
			// deploy): a clean exit, so a supervisor does not restart this
			// one to take the agent back.
			logger.Info("echo-agent stopped: replaced by a newer process of its key")
			return 0
		}
		if errors.Is(err, provider.ErrRegisterRefused) {
			// Sending the same register again would be refused again:
			// the agent, or the broker's limit err names, must change.
			logger.Error("echo-agent stopped: funduq refused its register", "err", err)
			return 1
		}
		logger.Error("echo-agent stopped", "err", err)
		return 1
	}
	logger.Info("echo-agent stopped")
	return 0
}

// commandLine handles the arguments before anything else: done says it
// answered them (with that exit code) and the agent must not start.
func commandLine(args []string, stdout, stderr io.Writer) (code int, done bool) {
	switch {
	case len(args) == 0:
		return 0, false
	case len(args) == 1 && (args[0] == "-h" || args[0] == "--help"):
		fmt.Fprint(stdout, usage)
		return 0, true
	default:
		fmt.Fprintf(stderr, "echo-agent: unexpected argument %q (the settings are environment variables)\n\n%s", args[0], usage)
		return 2, true
	}
}

const usage = `usage: go run ./examples/echo-agent

Serves one agent that answers every run with "echo: " and the last user message. Prints its
public key (the <providerKey> callers address) and fingerprint, logs JSON to stderr, and
stops cleanly on SIGINT or SIGTERM.

Settings (environment):
  FUNDUQ_BROKER_URL           broker node URL (http://127.0.0.1:8700)
  FUNDUQ_AGENT_KEY_FILE       file holding the Ed25519 seed as 64 hex characters
                              (./echo-agent.key; created with mode 0600 when absent)
  FUNDUQ_PUBLIC_KEY           optional pin of funduq's public key (64 hex)
  FUNDUQ_AGENT_NAME           agent name (echo)
  FUNDUQ_MAX_CONCURRENT_RUNS  declared capacity (unset: unlimited)
`
