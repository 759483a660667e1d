//go:build !linux

package netpolicy

import (
	"context"
	"fmt"
)

// Session is the egress policy of one sandbox run (Linux only, except
// ModeNone).
type Session struct {
	mode Mode
}

// Start returns a Session for ModeNone, which needs nothing from the
// kernel here, and an error wrapping ErrNotSupported for the other modes:
// the programs need Linux.
func Start(ctx context.Context, cfg Config) (*Session, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Policy.Mode != ModeNone {
		return nil, fmt.Errorf("%w: network mode %s needs Linux cgroup BPF", ErrNotSupported, cfg.Policy.Mode)
	}
	return &Session{mode: ModeNone}, nil
}

// Forwarder is nil: no forwarder runs here.
func (s *Session) Forwarder() *Forwarder { return nil }

// Audit returns an empty log.
func (s *Session) Audit() (Audit, error) { return Audit{Mode: s.mode}, nil }

// Close does nothing.
func (s *Session) Close() error { return nil }
