package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/cairnfs/cairn/chunkstore"
	"github.com/cairnfs/cairn/daemon"
	"github.com/cairnfs/cairn/sandbox"
	"github.com/cairnfs/cairn/sandbox/cgroups"
)

type runOptions struct {
	globals
	Workspace string
	// Dir is where to mount the workspace if it is not mounted yet
	// (default HOME/mnt/WORKSPACE); From starts a new workspace there.
	Dir, From string
	Spec      sandbox.Spec
	Net       netOptions
	Message   string
	Labels    map[string]string
	// NoSnapshot skips the turn-end snapshot.
	NoSnapshot bool
	// Stderr gets cairn's own lines (the snapshot ID); the command's
	// streams are in Spec.
	Stderr io.Writer
}

// runResult is what a run did: the command's outcome and its snapshot.
type runResult struct {
	Sandbox  *sandbox.Result
	Snapshot string // "" when none was taken
	Done     bool   // the snapshot is in the store and the head points at it
}

func newRunCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "run a command in a sandbox with the workspace at /workspace, then snapshot (one agent turn)",
		ArgsUsage: "WORKSPACE -- CMD [ARGS...]",
		Description: `Runs CMD as one turn of an agent: mounts WORKSPACE if it is not mounted
(at --mount-dir, default HOME/mnt/WORKSPACE; a new workspace is created,
empty or --from SNAP), runs CMD in a sandbox with the workspace at
/workspace, waits for it, and takes the turn-end snapshot, whose record
carries the run's provenance (argv, exit status, duration, rootfs, uid,
limits). The snapshot's ID is printed on stderr; cairn run exits with
CMD's status (128+N when a signal N killed it, 124 when --timeout did).

The sandbox: user, mount, pid, network (loopback only), UTS, IPC and
cgroup namespaces; the workload is root inside, an unprivileged uid on the
host (100000), with no capabilities, no_new_privs, Landlock (writes only
under /workspace, /tmp and the persisted paths) and a seccomp allowlist
(x86_64 and i386; mount, namespaces, bpf, ptrace, io_uring, keyrings and
the like fail with EPERM). Its root is the host's / read-only (or --rootfs
DIR), with a fresh /tmp, /proc, /run and a minimal /dev. The environment is
empty but for --env; nothing else of the caller's gets in. If a protection
cannot be applied here, cairn run refuses to run.

--persist PATH keeps PATH (e.g. /root, /usr/local, /root/.cache) in the
workspace, under .cairn/persist, bound writable over the base: installed
packages and caches survive turns, forks and resumes like /workspace does.
It is seeded from the base on first use (from the host's /, only what any
user may read).

--setup CMD runs first, in the same sandbox, with the --secret-env
variables (their values taken from cairn run's environment) and the
--secret-file SRC:DST files; the agent's command gets none of them, the
files are removed before it starts and never reach a snapshot (the record
lists them as excluded, never their content).

Examples:
   cairn run agent-1 -- make test
   cairn run agent-1 --persist /root --persist /usr/local -- sh -c 'pip install requests'
   cairn run agent-1 --memory 2G --pids 512 --timeout 10m -m "turn 7" -- ./agent.sh
   GH_TOKEN=... cairn run agent-1 --setup 'git clone https://x-access-token:$GH_TOKEN@github.com/o/r /workspace/r' \
       --secret-env GH_TOKEN -- make -C /workspace/r`,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "mount-dir", Usage: "where to mount the workspace if it is not mounted (default HOME/mnt/WORKSPACE)"},
			&cli.StringFlag{Name: "from", Usage: "create a new workspace from snapshot `SNAP` (when not mounted yet)"},
			&cli.StringFlag{Name: "rootfs", Usage: "the sandbox's root: base image directory `DIR`, read-only (default: the host's /)"},
			&cli.StringSliceFlag{Name: "persist", Usage: "keep `PATH` inside the sandbox in the workspace (repeatable)"},
			&cli.StringFlag{Name: "workdir", Usage: "the command's working directory inside the sandbox (default /workspace)"},
			&cli.StringSliceFlag{Name: "env", Usage: "`NAME=VALUE`, or NAME to pass cairn run's own value (repeatable)"},
			&cli.StringFlag{Name: "hostname", Usage: "the sandbox's hostname (default cairn)"},
			&cli.StringFlag{Name: "memory", Usage: "memory limit, `SIZE` (K, M, G suffixes)"},
			&cli.Int64Flag{Name: "pids", Usage: "limit on processes and threads"},
			&cli.Float64Flag{Name: "cpus", Usage: "CPU limit, in CPUs (e.g. 1.5)"},
			&cli.DurationFlag{Name: "timeout", Usage: "kill the sandbox after `DURATION` (exit status 124)"},
			&cli.StringFlag{Name: "setup", Usage: "run `CMD` (sh -c) first, with the secrets"},
			&cli.StringSliceFlag{Name: "secret-env", Usage: "pass variable `NAME` of cairn run's environment to --setup only (repeatable)"},
			&cli.StringSliceFlag{Name: "secret-file", Usage: "show host file SRC at DST to --setup only, `SRC:DST` (repeatable)"},
			&cli.StringFlag{Name: "message", Aliases: []string{"m"}, Usage: "the snapshot's message (default: the command line)"},
			&cli.StringSliceFlag{Name: "label", Usage: "a label `K=V` for the snapshot (repeatable)"},
			&cli.BoolFlag{Name: "no-snapshot", Usage: "skip the turn-end snapshot"},
		}, netFlags()...),
		Action: func(c *cli.Context) error {
			if c.NArg() < 2 {
				return usageError{errors.New("run takes WORKSPACE -- CMD [ARGS...]")}
			}
			g, err := globalsFrom(c)
			if err != nil {
				return err
			}
			opts := runOptions{globals: g, Workspace: c.Args().First(), Dir: c.String("mount-dir"), From: c.String("from"),
				Message: c.String("message"), NoSnapshot: c.Bool("no-snapshot"), Stderr: os.Stderr}
			if opts.Labels, err = parseLabels(c.StringSlice("label")); err != nil {
				return err
			}
			if err := specFromFlags(c, &opts.Spec); err != nil {
				return err
			}
			if opts.Net, err = policyFromFlags(c); err != nil {
				return err
			}
			opts.Spec.Args = c.Args().Slice()[1:]
			if len(opts.Spec.Args) > 0 && opts.Spec.Args[0] == "--" {
				opts.Spec.Args = opts.Spec.Args[1:]
			}
			if len(opts.Spec.Args) == 0 {
				return usageError{errors.New("run takes WORKSPACE -- CMD [ARGS...]: no command")}
			}
			opts.Spec.Stdin, opts.Spec.Stdout, opts.Spec.Stderr = os.Stdin, os.Stdout, os.Stderr
			res, err := runRun(c.Context, opts)
			if err != nil {
				return err
			}
			return commandStatus(res.Sandbox)
		},
	}
}

// specFromFlags fills the sandbox spec from the command line.
func specFromFlags(c *cli.Context, s *sandbox.Spec) error {
	s.RootFS, s.Dir, s.Hostname, s.Timeout = c.String("rootfs"), c.String("workdir"), c.String("hostname"), c.Duration("timeout")
	s.Persist = c.StringSlice("persist")
	if s.RootFS != "" {
		abs, err := absolute(s.RootFS)
		if err != nil {
			return err
		}
		s.RootFS = abs
	}
	for _, e := range c.StringSlice("env") {
		if !strings.Contains(e, "=") {
			v, ok := os.LookupEnv(e)
			if !ok {
				return usageError{fmt.Errorf("--env %s: not set in cairn run's environment; pass --env %s=VALUE", e, e)}
			}
			e += "=" + v
		}
		s.Env = append(s.Env, e)
	}
	if m := c.String("memory"); m != "" {
		n, err := parseSize(m)
		if err != nil {
			return usageError{fmt.Errorf("--memory %q: %w", m, err)}
		}
		s.Limits.MemoryBytes = n
	}
	s.Limits.Pids, s.Limits.CPUs = c.Int64("pids"), c.Float64("cpus")
	secretEnv, secretFiles := c.StringSlice("secret-env"), c.StringSlice("secret-file")
	setup := c.String("setup")
	if setup == "" {
		if len(secretEnv)+len(secretFiles) > 0 {
			return usageError{errors.New("--secret-env and --secret-file are for --setup only; give --setup CMD")}
		}
		return nil
	}
	s.Setup = &sandbox.Phase{Args: []string{"/bin/sh", "-c", setup}}
	for _, name := range secretEnv {
		v, ok := os.LookupEnv(name)
		if !ok {
			return usageError{fmt.Errorf("--secret-env %s: not set in cairn run's environment", name)}
		}
		s.Setup.SecretEnv = append(s.Setup.SecretEnv, name+"="+v)
	}
	for _, f := range secretFiles {
		src, dst, ok := strings.Cut(f, ":")
		if !ok || src == "" || dst == "" {
			return usageError{fmt.Errorf("--secret-file %q: want SRC:DST (a host file and a path inside the sandbox)", f)}
		}
		abs, err := absolute(src)
		if err != nil {
			return err
		}
		s.Setup.SecretFiles = append(s.Setup.SecretFiles, sandbox.SecretFile{Src: abs, Dst: dst})
	}
	return nil
}

// commandStatus turns the command's outcome into cairn run's exit status.
func commandStatus(r *sandbox.Result) error {
	switch {
	case r.TimedOut:
		return exitStatus(exitTimedOut)
	case r.ExitCode < 0:
		return exitStatus(exitSandbox)
	case r.ExitCode == 0:
		return nil
	}
	return exitStatus(r.ExitCode)
}

// exitStatus is an exit status passed through from a command: no message.
type exitStatus int

func (e exitStatus) Error() string { return "exit status " + strconv.Itoa(int(e)) }

// runRun mounts the workspace if needed, runs the sandbox and snapshots.
func runRun(ctx context.Context, opts runOptions) (*runResult, error) {
	if err := chunkstore.ValidWorkspaceName(opts.Workspace); err != nil {
		return nil, err
	}
	defer sweepRuns(opts.Home, opts.Stderr)() // what killed runs left; this run is alive until it returns
	dir, err := ensureMounted(ctx, opts)
	if err != nil {
		return nil, err
	}
	spec := opts.Spec
	spec.Workspace = dir
	spec.Tag = runTag(opts.Home)
	if err := spec.Validate(); err != nil {
		return nil, usageError{err}
	}
	eg := &egress{opts: opts.Net, home: opts.Home}
	if err := eg.setup(ctx, &spec, func(s string) { fmt.Fprintln(opts.Stderr, s) }); err != nil {
		return nil, sandboxFailure{err}
	}
	start := time.Now()
	res, runErr := sandbox.Run(ctx, &spec)
	egressLog, egErr := eg.finish()
	if egErr != nil {
		fmt.Fprintf(opts.Stderr, "cairn: egress policy: %v\n", egErr)
	}
	if res == nil {
		if runErr == nil {
			runErr = errors.New("the sandbox returned no result")
		}
		return nil, sandboxFailure{runErr}
	}
	out := &runResult{Sandbox: res}
	if runErr != nil && res.StartLatency == 0 && res.SetupExitCode < 0 {
		// Nothing of the turn ran (the sandbox could not be made): there is
		// nothing to snapshot.
		return out, sandboxFailure{runErr}
	}
	if opts.NoSnapshot {
		return out, runErr
	}
	rec, err := daemon.ReadRecord(opts.Home, opts.Workspace)
	if err != nil {
		return out, errors.Join(runErr, fmt.Errorf("the turn-end snapshot: %w", err))
	}
	msg := opts.Message
	if msg == "" {
		msg = "cairn run: " + strings.Join(spec.Args, " ")
	}
	req := daemon.SnapshotRequest{Message: msg, Labels: opts.Labels, Wait: true,
		Provenance: provenance(&spec, res, runErr, start), Excluded: secretExclusions(&spec), Egress: egressLog}
	rep, err := daemon.NewClient(rec.Socket).Snapshot(ctx, req)
	if err != nil {
		return out, errors.Join(runErr, fmt.Errorf("the turn-end snapshot: %w", err))
	}
	out.Snapshot, out.Done = rep.ID, rep.Done
	state := "done"
	if !rep.Done {
		state = fmt.Sprintf("committed here, upload queued (%d writes)", rep.PendingUploads)
	}
	fmt.Fprintf(opts.Stderr, "cairn: snapshot %s (%s@%d): %s\n", rep.ID, opts.Workspace, rep.Seq, state)
	return out, runErr
}

// sandboxFailure is an error that kept the sandbox, or a protection asked
// for, from being set up: nothing of the command ran (exit 125, unless the
// error says the input was wrong or the command could not be started).
type sandboxFailure struct{ err error }

func (f sandboxFailure) Error() string { return f.err.Error() }
func (f sandboxFailure) Unwrap() error { return f.err }

// ensureMounted returns the mount point of the workspace, mounting it
// first if no daemon serves it. The daemon is a process of its own (never
// the parent of the sandbox: go-fuse's deadlock rules).
func ensureMounted(ctx context.Context, opts runOptions) (string, error) {
	r, err := daemon.ReadRecord(opts.Home, opts.Workspace)
	if err == nil && r.Alive() {
		if opts.From != "" {
			return "", usageError{fmt.Errorf("--from: workspace %q is mounted already (at %s)", opts.Workspace, r.Dir)}
		}
		return r.Dir, nil
	}
	if err != nil && !errors.Is(err, daemon.ErrNotMounted) {
		return "", err
	}
	dir := opts.Dir
	if dir == "" {
		dir = filepath.Join(opts.Home, "mnt", opts.Workspace)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("mount point %s: %w", dir, err)
	}
	if err := runMount(ctx, mountOptions{globals: opts.globals, Workspace: opts.Workspace, Dir: dir, From: opts.From, Quiet: true}); err != nil {
		return "", err
	}
	return dir, nil
}

// provenance is what the snapshot record says of the run.
func provenance(s *sandbox.Spec, r *sandbox.Result, runErr error, start time.Time) map[string]string {
	p := map[string]string{
		"run.argv":        jsonString(s.Args),
		"run.exit_status": strconv.Itoa(r.ExitCode),
		"run.duration":    time.Since(start).Round(time.Millisecond).String(),
		"run.rootfs":      cmp(s.RootFS, "/"),
		"run.uid":         fmt.Sprintf("0 in the sandbox, %d on the host", r.HostIDBase),
		"run.started":     start.UTC().Format(time.RFC3339Nano),
	}
	if r.Signal != "" {
		p["run.signal"] = r.Signal
	}
	if r.TimedOut {
		p["run.timed_out"] = s.Timeout.String()
	}
	if r.OOMKilled {
		p["run.oom_killed"] = "true"
	}
	if runErr != nil {
		p["run.error"] = oneLine(runErr)
	}
	if l := limitsString(s.Limits, s.Timeout); l != "" {
		p["run.limits"] = l
	}
	if len(s.Persist) > 0 {
		p["run.persist"] = strings.Join(s.Persist, ",")
	}
	if s.Setup != nil {
		p["run.setup"] = jsonString(s.Setup.Args)
		p["run.setup_exit_status"] = strconv.Itoa(r.SetupExitCode)
		if len(r.SecretEnv) > 0 {
			p["run.secret_env"] = strings.Join(r.SecretEnv, ",") // names only
		}
		if len(r.SecretFiles) > 0 {
			p["run.secret_files"] = strings.Join(r.SecretFiles, ",") // paths only
		}
	}
	if !r.WorkspaceIDMapped {
		p["run.workspace_idmap"] = "off: " + r.WorkspaceIDMapError
	}
	if r.Stats.MemoryPeak > 0 {
		p["run.memory_peak"] = strconv.FormatInt(r.Stats.MemoryPeak, 10)
	}
	return p
}

// jsonString is v as JSON, without HTML escapes (a shell's > stays >).
func jsonString(v any) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
	return strings.TrimSuffix(b.String(), "\n")
}

func cmp(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func limitsString(l cgroups.Limits, timeout time.Duration) string {
	var parts []string
	if l.MemoryBytes > 0 {
		parts = append(parts, "memory="+strconv.FormatInt(l.MemoryBytes, 10))
	}
	if l.Pids > 0 {
		parts = append(parts, "pids="+strconv.FormatInt(l.Pids, 10))
	}
	if l.CPUs > 0 {
		parts = append(parts, "cpus="+strconv.FormatFloat(l.CPUs, 'g', -1, 64))
	}
	if timeout > 0 {
		parts = append(parts, "timeout="+timeout.String())
	}
	return strings.Join(parts, " ")
}

// secretExclusions lists the secret files whose destination lies in the
// workspace (directly or in a persisted path): they were never written
// there, and the record says so. Secret files elsewhere are named in the
// provenance (run.secret_files).
func secretExclusions(s *sandbox.Spec) []chunkstore.Exclusion {
	if s.Setup == nil {
		return nil
	}
	var out []chunkstore.Exclusion
	for _, f := range s.Setup.SecretFiles {
		dst := path.Clean(f.Dst)
		rel, ok := strings.CutPrefix(dst, sandbox.WorkspaceDir+"/")
		if !ok {
			for _, p := range s.Persist {
				p = path.Clean(p)
				if dst == p || strings.HasPrefix(dst, p+"/") {
					rel, ok = path.Join(sandbox.PersistDir, strings.TrimPrefix(dst, "/")), true
					break
				}
			}
		}
		if ok {
			out = append(out, chunkstore.Exclusion{Path: rel, Reason: "secret file of cairn run --setup (never written to the workspace)"})
		}
	}
	return out
}

// runTag is the tag in the cgroup names of the runs a state directory
// starts (cairn-run-TAG-RANDOM): the first 8 hex digits of the SHA-256 of
// its absolute path. It tells them from other cairns' runs on the machine.
func runTag(home string) string {
	h := sha256.Sum256([]byte(home))
	return hex.EncodeToString(h[:4])
}
