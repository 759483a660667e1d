package cgroupbpf

import "errors"

var (
	// ErrNotSupported: the kernel cannot run the egress programs here: no
	// BPF, a missing program type, map type, helper or bpf_link for cgroups,
	// no cgroup2, or not Linux. Load and Attach never fall back to running
	// without a hook that was asked for: they return an error wrapping this
	// one (and, where cilium/ebpf reported it, its own ErrNotSupported).
	ErrNotSupported = errors.New("cgroup BPF egress programs not supported")
	// ErrInvalid: a Config or Rule is malformed (a zone, an address that is
	// not IPv4 or IPv6, an inverted port range, an unknown mode).
	ErrInvalid = errors.New("invalid egress policy")
	// ErrFull: a map or a map entry is out of room: more port ranges for one
	// prefix or address than an entry holds (MaxPortRanges), or more
	// prefixes or addresses than the map was created for.
	ErrFull = errors.New("egress policy map full")
	// ErrClosed: the Programs were used after Close.
	ErrClosed = errors.New("egress programs closed")
	// ErrInUse: RemoveDead found a process in a cgroup that the pinned
	// programs are attached to, so it left them attached.
	ErrInUse = errors.New("pinned egress programs still in use")
)
