package sandbox

import "errors"

var (
	// ErrNotSupported: a protection the sandbox is made of cannot be applied
	// here (no user namespaces, no seccomp, no Landlock, not host root, not
	// Linux). Run fails closed with an error wrapping it: it never runs the
	// command with less confinement.
	ErrNotSupported = errors.New("sandbox not supported")
	// ErrInvalid: the Spec is malformed (a relative path, an empty command,
	// a persisted path that cannot be persisted...). Nothing was started.
	ErrInvalid = errors.New("invalid sandbox spec")
	// ErrInit: the sandbox's init could not build the sandbox (a mount, the
	// root switch, a persisted path or a secret file that could not be put in
	// place). The command did not run.
	ErrInit = errors.New("sandbox init failed")
	// ErrExec: the command (of the agent or of the setup phase) could not be
	// started inside the sandbox: not found, not executable, or its working
	// directory is missing.
	ErrExec = errors.New("sandbox command could not be started")
	// ErrSetupFailed: the setup phase exited with a nonzero status or was
	// killed; the agent phase did not run.
	ErrSetupFailed = errors.New("sandbox setup phase failed")
	// ErrCanceled: Run's context was canceled (or its deadline passed) and
	// the sandbox was killed. The error also matches the context's own error
	// (context.Canceled or context.DeadlineExceeded).
	ErrCanceled = errors.New("sandbox run canceled")
)

// kindError is an error reported by the sandbox's init (or the command
// starter) across the process boundary: its text is the child's, and it
// matches the sentinel of its kind through Is.
type kindError struct {
	kind error
	msg  string
}

func (e *kindError) Error() string { return e.msg }

func (e *kindError) Is(target error) bool { return target == e.kind }

// Error kinds as sent from init to Run.
const (
	kindInit         = "init"
	kindExec         = "exec"
	kindNotSupported = "not-supported"
)

// errorOfKind turns a reported kind and message into an error matching the
// kind's sentinel.
func errorOfKind(kind, msg string) error {
	return &kindError{kind: sentinelOf(kind), msg: msg}
}

// sentinelOf is the sentinel of a reported kind.
func sentinelOf(kind string) error {
	switch kind {
	case kindExec:
		return ErrExec
	case kindNotSupported:
		return ErrNotSupported
	}
	return ErrInit
}
