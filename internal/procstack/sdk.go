package procstack

import (
	"context"
	"sync"

	"github.com/funduq/funduq-go/provider"
)

// SDK is a provider built with our Go SDK (package provider), run in this
// process: its Run goroutine is owned by the SDK value and stopped by Stop,
// or by the Stack's Close at the latest.
type SDK struct {
	Client *provider.Client

	cancel context.CancelFunc
	done   chan struct{}
	err    error // Run's return, once done is closed
	once   sync.Once
}

// RunSDK builds a provider client from cfg and runs it until Stop or
// Close. The error is provider.New's (a config it refuses).
func (s *Stack) RunSDK(cfg provider.Config) (*SDK, error) {
	cl, err := provider.New(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &SDK{Client: cl, cancel: cancel, done: make(chan struct{})}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		cancel()
		return nil, ErrClosed
	}
	s.sdks = append(s.sdks, p)
	s.mu.Unlock()
	go func() { defer close(p.done); p.err = cl.Run(ctx) }()
	return p, nil
}

// Done is closed once Run has returned.
func (p *SDK) Done() <-chan struct{} { return p.done }

// Err is what Run returned (nil before Done; nil or context.Canceled after
// Stop).
func (p *SDK) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// Stop cancels Run and waits for it to return, or for ctx (then the
// goroutine still ends, on its own, once its link has closed).
func (p *SDK) Stop(ctx context.Context) error {
	p.once.Do(p.cancel)
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return &ProcError{Proc: "sdk provider", Op: "stop", Err: context.Cause(ctx)}
	}
}
