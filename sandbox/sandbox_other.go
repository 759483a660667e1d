//go:build !linux

package sandbox

import (
	"context"
	"fmt"
	"runtime"
)

// Run fails: the sandbox is made of Linux namespaces, Landlock, seccomp and
// cgroups. The Spec is validated first, as on Linux.
func Run(ctx context.Context, s *Spec) (*Result, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("sandbox: %w: not Linux (%s)", ErrNotSupported, runtime.GOOS)
}

// MaybeInit does nothing: there is no sandbox init outside Linux.
func MaybeInit() {}
