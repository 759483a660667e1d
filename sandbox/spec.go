package sandbox

import (
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"time"

	"github.com/cairnfs/cairn/sandbox/cgroups"
)

// Defaults and fixed values of the sandbox.
const (
	// DefaultHostIDBase is the host uid and gid that the sandbox's uid and
	// gid 0 map to: sandbox ids 0..IDMapSize-1 are host ids
	// 100000..165535, so the workload (root inside) is never host root.
	DefaultHostIDBase = 100000
	// MinHostIDBase is the smallest HostIDBase accepted: the mapped range
	// must stay clear of the host's system and regular users.
	MinHostIDBase = 65536
	// IDMapSize is the number of uids (and gids) mapped into the sandbox.
	IDMapSize = 65536
	// DefaultHostname is the sandbox's hostname when Spec.Hostname is empty.
	DefaultHostname = "cairn"
	// WorkspaceDir is where Spec.Workspace appears inside the sandbox, and
	// the default working directory.
	WorkspaceDir = "/workspace"
	// DefaultPath is the search path used to find the command when
	// Spec.Env has no PATH. It is used for the lookup only: it is not added
	// to the command's environment.
	DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	// PersistDir is the reserved directory of the workspace, relative to
	// its root, that holds the persisted paths: Persist path /usr/local is
	// kept in <workspace>/.cairn/persist/usr/local. The sandbox sees
	// /workspace/.cairn as an empty read-only directory.
	PersistDir = ".cairn/persist"
	// MaxSecretFileSize is the largest secret file accepted, in bytes.
	MaxSecretFileSize = 1 << 20
	// RunDir is the sandbox's /run: a fresh read-only tmpfs holding only
	// Spec.RunFiles.
	RunDir = "/run"
	// MaxRunFilesSize is the largest total size of Spec.RunFiles, in bytes.
	MaxRunFilesSize = 16 << 20
	// MinPids is the smallest pids limit accepted: the limit counts threads,
	// and the sandbox's init and command starter (Go programs) use about 13
	// before the command runs.
	MinPids = 32
)

// reservedDirs are the sandbox paths the sandbox builds itself: they cannot
// be persisted nor receive secret files.
var reservedDirs = []string{WorkspaceDir, "/proc", "/sys", "/dev", "/tmp", "/run"}

// Spec describes one sandboxed run. It is plain data: the zero value of
// every optional field works, and Validate checks it without touching the
// system.
type Spec struct {
	// Args is the agent's command and its arguments (required). Args[0] is
	// looked up in the PATH of Env, or in DefaultPath when Env has none,
	// inside the sandbox.
	Args []string
	// Env is the command's whole environment, as NAME=VALUE entries.
	// Default: empty. Nothing of the caller's environment is passed on.
	Env []string
	// Dir is the working directory inside the sandbox, absolute. Default
	// WorkspaceDir.
	Dir string
	// Workspace is the host directory (in production the workspace's FUSE
	// mount, mounted with allow_other) that appears at /workspace, through
	// an id-mapped mount where the filesystem supports it (see the package
	// documentation). Required, absolute.
	Workspace string
	// RootFS is a host directory holding the base image the sandbox's root
	// is made of, read-only. Default "": the host's own root.
	RootFS string
	// Persist lists absolute paths inside the sandbox (such as /root,
	// /usr/local, /root/.cache) whose content is kept in the workspace,
	// under PersistDir, and bound writable over the base. On first use each
	// is seeded from the base. Default none.
	Persist []string
	// Hostname is the sandbox's hostname. Default DefaultHostname.
	Hostname string
	// Tag goes into the name of the run's cgroup, cairn-run-TAG-RANDOM,
	// so that whoever started runs can tell their cgroups from those of
	// other runs on the machine: up to 16 lowercase letters and digits.
	// Default none: cairn-run-RANDOM.
	Tag string
	// HostNetwork keeps the sandbox in the host's network namespace, for an
	// egress policy that BeforeStart attaches to the run's cgroup (package
	// netpolicy). The workload holds no capability there (the namespace
	// belongs to the host's user namespace): no raw sockets, no interfaces.
	// Default false: a network namespace of its own with only lo.
	HostNetwork bool
	// HostIDBase is the host uid and gid of the sandbox's root; sandbox ids
	// 0..IDMapSize-1 map to HostIDBase... Default DefaultHostIDBase;
	// otherwise at least MinHostIDBase.
	HostIDBase uint32
	// Limits are the sandbox's resource limits (memory in bytes, pids,
	// CPUs), for all its processes, init included. Default: none. A pids
	// limit must be at least MinPids.
	Limits cgroups.Limits
	// Timeout bounds the whole run (setup phase included): when it passes,
	// every process of the sandbox is killed and Result.TimedOut is set.
	// Default 0: no timeout.
	Timeout time.Duration
	// TmpSize is the size limit of the sandbox's /tmp and /dev/shm tmpfs
	// (each), in bytes. Default 0: half of Limits.MemoryBytes when that is
	// set, else the kernel's default (half of the machine's memory). Their
	// pages are charged to the sandbox's memory limit either way.
	TmpSize int64
	// Setup is an optional phase that runs before the agent's command, in
	// the same sandbox, with secrets the agent phase does not get. Default
	// nil: no setup phase.
	Setup *Phase
	// RunFiles are files every phase sees, read-only, under RunDir (such
	// as a CA bundle at /run/cairn/ca-bundle.pem). They are written to the
	// sandbox's /run tmpfs before it is made read-only: never to the
	// workspace or any disk. Default none.
	RunFiles []RunFile
	// Stdin, Stdout and Stderr are the command's standard streams (for both
	// phases). The sandbox always gets pipes, which Run copies from and to
	// these (see the package documentation). Default nil: an empty stdin,
	// output discarded. Run copies from Stdin in a goroutine that it does
	// not wait for: if Stdin blocks (a terminal the command never reads),
	// that goroutine keeps reading from it after Run returned, and what it
	// reads is lost; pass nil when the command needs no input.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// BeforeStart, if set, is called once the sandbox's init is in its
	// cgroups and before anything of the workload runs (its root is not
	// built yet), with the run's cgroup and init's host pid: netpolicy
	// attaches its BPF programs to g there. An error aborts the run: init is
	// killed and Run returns the error. Default nil.
	BeforeStart func(g *cgroups.Group, initPid int) error
}

// Phase is the setup phase: a command run before the agent's, in the same
// sandbox and with the same confinement, that alone sees the secrets.
type Phase struct {
	// Args is the setup command and its arguments (required), looked up like
	// Spec.Args. It runs in Spec.Dir with Spec.Env plus SecretEnv.
	Args []string
	// SecretEnv are NAME=VALUE entries added to Spec.Env for this phase
	// only. A name may not also be in Spec.Env.
	SecretEnv []string
	// SecretFiles are host files whose content this phase sees at a path
	// inside the sandbox; the agent phase does not, and they are never
	// written to the workspace.
	SecretFiles []SecretFile
}

// SecretFile is a host file shown to the setup phase only.
type SecretFile struct {
	// Src is the host path, absolute. Run (as host root) reads it; the
	// sandbox never sees the host path. At most MaxSecretFileSize bytes.
	Src string
	// Dst is the path inside the sandbox, absolute. If it does not exist, an
	// empty placeholder (and any missing parent directory) is created for
	// the phase and removed afterwards, which needs a writable place
	// (/workspace, /tmp or a persisted path).
	Dst string
}

// RunFile is a read-only file under the sandbox's /run, for every phase.
// It is not secret: any process of the sandbox can read it.
type RunFile struct {
	// Path is the path inside the sandbox: absolute, clean, below RunDir
	// ("/run/cairn/ca-bundle.pem"). Missing directories are created, mode
	// 0755.
	Path string
	// Data is the content. All RunFiles together hold at most
	// MaxRunFilesSize bytes.
	Data []byte
	// Mode is the permission bits (no setuid, setgid or sticky bit).
	// Default 0: 0444.
	Mode fs.FileMode
}

// Result is the outcome of a run.
type Result struct {
	// ExitCode is the agent command's exit status; 128+n when it died of
	// signal n. -1 when the agent phase never ended on its own (the sandbox
	// failed to start, the setup phase failed, the run was killed before the
	// agent started).
	ExitCode int
	// Signal names the signal that killed the agent command ("SIGKILL"),
	// "" when it exited normally.
	Signal string
	// SetupExitCode is the setup phase's exit status (128+n for signal n),
	// -1 when there was no setup phase or it did not end on its own.
	SetupExitCode int
	// Duration is the wall time of the run, from Run's call until every
	// process of the sandbox was gone.
	Duration time.Duration
	// StartLatency is the time from Run's call until the agent command was
	// executed (the setup phase included), 0 if it never was.
	StartLatency time.Duration
	// TimedOut is set when Spec.Timeout passed and the sandbox was killed.
	TimedOut bool
	// Canceled is set when Run's context ended and the sandbox was killed.
	Canceled bool
	// OOMKilled is set when the kernel's OOM killer killed a process of the
	// sandbox because of its memory limit.
	OOMKilled bool
	// WorkspaceIDMapped reports whether /workspace was an id-mapped mount;
	// when false, WorkspaceIDMapError says why (the filesystem refused), and
	// the workspace was bound without id mapping.
	WorkspaceIDMapped   bool
	WorkspaceIDMapError string
	// HostIDBase is the host uid and gid the sandbox's root ran as.
	HostIDBase uint32
	// SecretFiles lists the Dst of each secret file the setup phase was
	// given, and SecretEnv the names of its secret variables: never their
	// content.
	SecretFiles []string
	SecretEnv   []string
	// Stats is the sandbox's resource accounting at its end.
	Stats cgroups.Stats
}

// Validate checks the Spec's shape without touching the system; errors wrap
// ErrInvalid (or the cgroups package's ErrInvalid for limits).
func (s *Spec) Validate() error {
	if s == nil {
		return fmt.Errorf("sandbox: nil spec: %w", ErrInvalid)
	}
	if err := validateArgs("command", s.Args); err != nil {
		return err
	}
	names, err := validateEnv("Env", s.Env, nil)
	if err != nil {
		return err
	}
	if s.Dir != "" {
		if err := validateSandboxPath("working directory", s.Dir); err != nil {
			return err
		}
	}
	if s.Workspace == "" {
		return fmt.Errorf("sandbox: no workspace directory given: %w", ErrInvalid)
	}
	if !path.IsAbs(s.Workspace) {
		return fmt.Errorf("sandbox: workspace %q is not an absolute path: %w", s.Workspace, ErrInvalid)
	}
	if s.RootFS != "" && !path.IsAbs(s.RootFS) {
		return fmt.Errorf("sandbox: root filesystem %q is not an absolute path: %w", s.RootFS, ErrInvalid)
	}
	if err := validatePersist(s.Persist); err != nil {
		return err
	}
	if err := validateHostname(s.Hostname); err != nil {
		return err
	}
	if len(s.Tag) > 16 || strings.Trim(s.Tag, "abcdefghijklmnopqrstuvwxyz0123456789") != "" {
		return fmt.Errorf("sandbox: tag %q: want up to 16 lowercase letters and digits: %w", s.Tag, ErrInvalid)
	}
	if s.HostIDBase != 0 && (s.HostIDBase < MinHostIDBase || uint64(s.HostIDBase)+IDMapSize > 1<<32-1) {
		return fmt.Errorf("sandbox: host id base %d: want 0 (default %d) or %d..%d: %w",
			s.HostIDBase, DefaultHostIDBase, MinHostIDBase, uint64(1<<32-1)-IDMapSize, ErrInvalid)
	}
	if err := s.Limits.Validate(); err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	if s.Limits.Pids > 0 && s.Limits.Pids < MinPids {
		return fmt.Errorf("sandbox: pids limit %d is below %d, which the sandbox's own processes need room in: %w",
			s.Limits.Pids, MinPids, ErrInvalid)
	}
	if s.Timeout < 0 {
		return fmt.Errorf("sandbox: timeout %v is negative (0 means none): %w", s.Timeout, ErrInvalid)
	}
	if s.TmpSize < 0 {
		return fmt.Errorf("sandbox: /tmp size %d is negative (0 means the default): %w", s.TmpSize, ErrInvalid)
	}
	if s.Setup != nil {
		if err := s.Setup.validate(names); err != nil {
			return err
		}
	}
	return validateRunFiles(s.RunFiles)
}

// validateRunFiles checks the RunFiles' paths, modes and total size: each
// below RunDir, none twice, none inside another.
func validateRunFiles(files []RunFile) error {
	total := 0
	for i, f := range files {
		if err := validateSandboxPath("run file", f.Path); err != nil {
			return err
		}
		if !strings.HasPrefix(f.Path, RunDir+"/") {
			return fmt.Errorf("sandbox: run file %s is not below %s: %w", f.Path, RunDir, ErrInvalid)
		}
		if f.Mode&^fs.ModePerm != 0 {
			return fmt.Errorf("sandbox: run file %s: mode %v: want permission bits only: %w", f.Path, f.Mode, ErrInvalid)
		}
		for _, g := range files[:i] {
			if under(f.Path, g.Path) || under(g.Path, f.Path) {
				return fmt.Errorf("sandbox: run files %s and %s: the same path, or one inside the other: %w", g.Path, f.Path, ErrInvalid)
			}
		}
		total += len(f.Data)
	}
	if total > MaxRunFilesSize {
		return fmt.Errorf("sandbox: run files hold %d bytes, more than %d: %w", total, MaxRunFilesSize, ErrInvalid)
	}
	return nil
}

func (p *Phase) validate(envNames map[string]bool) error {
	if err := validateArgs("setup command", p.Args); err != nil {
		return err
	}
	if _, err := validateEnv("secret env", p.SecretEnv, envNames); err != nil {
		return err
	}
	dsts := map[string]bool{}
	for _, f := range p.SecretFiles {
		if f.Src == "" || !path.IsAbs(f.Src) {
			return fmt.Errorf("sandbox: secret file source %q is not an absolute path: %w", f.Src, ErrInvalid)
		}
		if err := validateSandboxPath("secret file destination", f.Dst); err != nil {
			return err
		}
		if f.Dst == "/" || underAny(f.Dst, []string{"/proc", "/sys", "/dev"}) {
			return fmt.Errorf("sandbox: secret file destination %s is in a directory the sandbox builds itself: %w", f.Dst, ErrInvalid)
		}
		if dsts[f.Dst] {
			return fmt.Errorf("sandbox: secret file destination %s given twice: %w", f.Dst, ErrInvalid)
		}
		dsts[f.Dst] = true
	}
	return nil
}

func validateArgs(what string, args []string) error {
	if len(args) == 0 || args[0] == "" {
		return fmt.Errorf("sandbox: no %s given: %w", what, ErrInvalid)
	}
	for _, a := range args {
		if strings.IndexByte(a, 0) >= 0 {
			return fmt.Errorf("sandbox: %s argument %q contains a NUL byte: %w", what, a, ErrInvalid)
		}
	}
	return nil
}

// validateEnv checks NAME=VALUE entries, returns the set of names, and
// rejects a name given twice or already in taken.
func validateEnv(what string, env []string, taken map[string]bool) (map[string]bool, error) {
	names := map[string]bool{}
	for _, kv := range env {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || name == "" || strings.IndexByte(kv, 0) >= 0 {
			return nil, fmt.Errorf("sandbox: %s entry %q: want NAME=VALUE without NUL bytes: %w", what, kv, ErrInvalid)
		}
		if names[name] || taken[name] {
			return nil, fmt.Errorf("sandbox: %s: variable %s given twice: %w", what, name, ErrInvalid)
		}
		names[name] = true
	}
	return names, nil
}

// validateSandboxPath checks that p is an absolute, clean path.
func validateSandboxPath(what, p string) error {
	if !path.IsAbs(p) {
		return fmt.Errorf("sandbox: %s %q is not an absolute path: %w", what, p, ErrInvalid)
	}
	if path.Clean(p) != p || strings.IndexByte(p, 0) >= 0 {
		return fmt.Errorf("sandbox: %s %q is not a clean path (want %q): %w", what, p, path.Clean(p), ErrInvalid)
	}
	return nil
}

func validateHostname(h string) error {
	if h == "" {
		return nil
	}
	bad := len(h) > 64 || h[0] == '-' || h[0] == '.'
	for _, c := range h {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			bad = true
		}
	}
	if bad {
		return fmt.Errorf("sandbox: hostname %q: want at most 64 letters, digits, '-' and '.', not starting with '-' or '.': %w", h, ErrInvalid)
	}
	return nil
}

// under reports whether p is dir or beneath it.
func under(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}

func underAny(p string, dirs []string) bool {
	for _, d := range dirs {
		if under(p, d) {
			return true
		}
	}
	return false
}

// withDefaults returns a copy of s with the defaults filled in.
func (s *Spec) withDefaults() *Spec {
	c := *s
	if c.Dir == "" {
		c.Dir = WorkspaceDir
	}
	if c.Hostname == "" {
		c.Hostname = DefaultHostname
	}
	if c.HostIDBase == 0 {
		c.HostIDBase = DefaultHostIDBase
	}
	if c.RootFS == "" {
		c.RootFS = "/"
	}
	if c.TmpSize == 0 && c.Limits.MemoryBytes > 0 {
		c.TmpSize = c.Limits.MemoryBytes / 2
	}
	return &c
}
