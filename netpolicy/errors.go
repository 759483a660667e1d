package netpolicy

import (
	"errors"
	"fmt"
)

var (
	// ErrNotSupported: a policy was asked for but cannot be enforced here
	// (no BPF, no cgroup2, not Linux). Start fails closed with an error
	// wrapping it (and cgroupbpf.ErrNotSupported where that is the cause);
	// it never runs the sandbox without the policy.
	ErrNotSupported = errors.New("egress policy not supported")
	// ErrInvalid: a policy, rule, file or config is malformed. The errors
	// are *RuleError or *FileError values that match it through Is.
	ErrInvalid = errors.New("invalid egress policy")
	// ErrClosed: a Session or Forwarder was used after Close.
	ErrClosed = errors.New("egress policy session closed")
)

// RuleError is a bad rule: which one, what is wrong, and what to write
// instead. It matches ErrInvalid.
type RuleError struct {
	// Rule names the rule as the user wrote it: `--allow 10.0.0.0/33`,
	// `allowHosts[2] "*.com"`.
	Rule string
	// Problem says what is wrong, Hint what to write instead ("" if none).
	Problem, Hint string
}

func (e *RuleError) Error() string {
	s := e.Rule + ": " + e.Problem
	if e.Hint != "" {
		s += " (" + e.Hint + ")"
	}
	return s
}

// Is makes errors.Is(err, ErrInvalid) hold.
func (e *RuleError) Is(target error) bool { return target == ErrInvalid }

// FileError is a problem in a policy file, at a line when known. It matches
// ErrInvalid, and unwraps to the RuleError or parser error behind it.
type FileError struct {
	Path string // the file, or "" for data without a name
	Line int    // 1-based; 0 when unknown
	Err  error
}

func (e *FileError) Error() string {
	name := e.Path
	if name == "" {
		name = "policy"
	}
	if e.Line > 0 {
		name = fmt.Sprintf("%s:%d", name, e.Line)
	}
	return name + ": " + e.Err.Error()
}

// Is makes errors.Is(err, ErrInvalid) hold.
func (e *FileError) Is(target error) bool { return target == ErrInvalid }

func (e *FileError) Unwrap() error { return e.Err }

func ruleErr(rule, problem, hint string) *RuleError {
	return &RuleError{Rule: rule, Problem: problem, Hint: hint}
}
