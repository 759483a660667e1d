package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/sandbox/cgroups"
	"github.com/cairnfs/cairn/sandbox/landlock"
	"github.com/cairnfs/cairn/sandbox/seccomp"
)

// Run runs the Spec's command in a new sandbox, waits until every process of
// the sandbox is gone, and returns how it ended. The caller must be host
// root, and the program's main must call MaybeInit first thing (Run
// re-executes the program as the sandbox's init).
//
// The command's exit status is in the Result, not the error: err is nil when
// the agent command ran and ended, whatever its status, and also when it was
// killed because Spec.Timeout passed (Result.TimedOut). err is set when the
// Spec is invalid (ErrInvalid; the Result is nil), when a protection cannot
// be applied (ErrNotSupported), when the sandbox could not be built (ErrInit)
// or the command not started (ErrExec), when the setup phase failed
// (ErrSetupFailed), when BeforeStart failed (its error, wrapped), and when
// ctx ended (ErrCanceled and ctx's error). Apart from an invalid Spec, the
// Result is returned along with the error, with what is known.
//
// Whatever happens, Run kills every process of the sandbox and removes its
// cgroups before it returns.
func Run(ctx context.Context, s *Spec) (*Result, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	r := &runner{spec: s.withDefaults(), start: time.Now()}
	r.res = &Result{ExitCode: -1, SetupExitCode: -1, HostIDBase: r.spec.HostIDBase}
	err := r.run(ctx)
	r.res.Duration = time.Since(r.start)
	return r.res, err
}

// preflight checks, before anything is created, that every protection the
// sandbox is made of can be applied here.
func preflight() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("sandbox: must run as host root (to map the sandbox's ids, create its cgroups and mounts): %w", ErrNotSupported)
	}
	if data, err := os.ReadFile("/proc/sys/user/max_user_namespaces"); err == nil && strings.TrimSpace(string(data)) == "0" {
		return fmt.Errorf("sandbox: user namespaces are disabled (user.max_user_namespaces is 0): %w", ErrNotSupported)
	}
	if _, err := landlock.Supported(); err != nil {
		return fmt.Errorf("sandbox: %w: %w", ErrNotSupported, err)
	}
	if err := seccomp.Supported(); err != nil {
		return fmt.Errorf("sandbox: %w: %w", ErrNotSupported, err)
	}
	return nil
}

// runner is one Run.
type runner struct {
	spec  *Spec
	start time.Time
	res   *Result
	// initErr is the first error init reported.
	initErr error
	// agentExited is set when init reported the agent's exit.
	agentExited bool
}

func (r *runner) run(ctx context.Context) (err error) {
	s := r.spec
	if err := ctx.Err(); err != nil {
		r.res.Canceled = true
		return fmt.Errorf("sandbox: %w: %w", ErrCanceled, err)
	}
	if err := preflight(); err != nil {
		return err
	}
	if fi, err := os.Stat(s.Workspace); err != nil {
		return fmt.Errorf("sandbox: workspace: %w", err)
	} else if !fi.IsDir() {
		return fmt.Errorf("sandbox: workspace %s is not a directory: %w", s.Workspace, ErrInvalid)
	}

	g, err := cgroups.Create(cgroupName(s.Tag), s.Limits)
	if err != nil {
		if errors.Is(err, cgroups.ErrNotSupported) {
			return fmt.Errorf("sandbox: %w: %w", ErrNotSupported, err)
		}
		return fmt.Errorf("sandbox: %w", err)
	}
	defer func() {
		if cerr := g.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("sandbox: remove the cgroup: %w", cerr))
		}
		r.res.Stats = g.Stats()
		r.res.OOMKilled = r.res.Stats.OOMKills > 0
	}()

	if err := preparePersist(ctx, s.Workspace, s.RootFS, s.Persist); err != nil {
		if ctx.Err() != nil {
			r.res.Canceled = true
			return fmt.Errorf("sandbox: %w: %w", ErrCanceled, err)
		}
		return err
	}
	cfg, err := r.config()
	if err != nil {
		return err
	}
	defer cfg.wipeSecrets()

	trees := &treeSet{}
	defer trees.close()
	if err := trees.addBase(s.RootFS, cfg); err != nil {
		return err
	}
	if err := trees.addDevices(cfg); err != nil {
		return err
	}

	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("sandbox: socketpair: %w", err)
	}
	sock, childSock := pair[0], os.NewFile(uintptr(pair[1]), "init-socket")
	streams, err := newStdio(s)
	if err != nil {
		unix.Close(sock)
		childSock.Close()
		return err
	}
	cmd := r.initCmd(g, childSock, streams)
	err = cmd.Start()
	childSock.Close()
	if err != nil {
		streams.closeAll()
		unix.Close(sock)
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("sandbox: create the sandbox's namespaces: %w: %w", ErrNotSupported, err)
		}
		return fmt.Errorf("sandbox: start init: %w", err)
	}

	streams.start(s)
	reports := make(chan report, 16)
	go readReports(sock, reports)
	waited := false
	defer func() {
		if !waited { // an early return, or a panic: nothing may survive
			g.Kill()
			cmd.Process.Kill()
			cmd.Wait()
			for rep := range reports {
				r.handle(rep)
			}
			streams.wait()
		}
		unix.Close(sock) // only now: readReports is done with it
	}()

	if err := g.Add(cmd.Process.Pid); err != nil {
		return fmt.Errorf("sandbox: put init in its cgroup: %w", err)
	}
	if s.BeforeStart != nil {
		if err := s.BeforeStart(g, cmd.Process.Pid); err != nil {
			return fmt.Errorf("sandbox: before-start hook: %w", err)
		}
	}
	idmapErr, err := trees.addWorkspace(s.Workspace, fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid), cfg)
	if err != nil {
		return err
	}
	r.res.WorkspaceIDMapped, r.res.WorkspaceIDMapError = idmapErr == "", idmapErr
	if err := r.send(sock, cfg, trees); err != nil {
		return err
	}

	waitErr := r.wait(ctx, cmd, g, reports)
	waited = true
	err = r.outcome(ctx, cmd, waitErr)
	if serr := streams.wait(); err == nil {
		err = serr
	}
	return err
}

// initCmd prepares init's process: new namespaces, the id mapping, the
// cgroup, the socket as fd 3, and nothing else of this process.
func (r *runner) initCmd(g *cgroups.Group, sock *os.File, streams *stdio) *exec.Cmd {
	s := r.spec
	ids := []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(s.HostIDBase), Size: IDMapSize}}
	attr := &syscall.SysProcAttr{
		Cloneflags: unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
			unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWCGROUP,
		UidMappings: ids,
		GidMappings: ids,
		// With setgroups allowed, Go calls setgroups(0) for the empty
		// Groups: init must not keep host root's supplementary groups (gid
		// 0 would open group-root files of the host to the sandbox).
		GidMappingsEnableSetgroups: true,
		Credential:                 &syscall.Credential{Uid: 0, Gid: 0, Groups: []uint32{}},
		Setsid:                     true,
		Pdeathsig:                  syscall.SIGKILL,
	}
	if s.HostNetwork {
		attr.Cloneflags &^= unix.CLONE_NEWNET
	}
	if fd, err := g.FD(); err == nil {
		attr.UseCgroupFD, attr.CgroupFD = true, fd
	}
	return &exec.Cmd{
		Path:        "/proc/self/exe",
		Args:        []string{initArg0},
		Env:         []string{stageEnv + "=init"},
		Dir:         "/",
		Stdin:       streams.child[0],
		Stdout:      streams.child[1],
		Stderr:      streams.child[2],
		ExtraFiles:  []*os.File{sock},
		SysProcAttr: attr,
	}
}

// config builds init's configuration, secrets included.
func (r *runner) config() (*initConfig, error) {
	s := r.spec
	binds, _ := persistPlan(s.Persist)
	writable := append([]string{WorkspaceDir, "/tmp", "/dev"}, binds...)
	cfg := &initConfig{
		Hostname:    s.Hostname,
		HostNetwork: s.HostNetwork,
		TmpSize:     s.TmpSize,
		Persist:     binds,
		Agent:       phaseConfig{Name: "agent", Args: s.Args, Env: s.Env, Dir: s.Dir, WritePaths: writable},
	}
	for _, f := range s.RunFiles {
		mode := uint32(f.Mode.Perm())
		if mode == 0 {
			mode = 0o444
		}
		cfg.RunFiles = append(cfg.RunFiles, secretConfig{Dst: f.Path, Mode: mode, Data: f.Data})
	}
	if p := s.Setup; p != nil {
		env := append(append([]string{}, s.Env...), p.SecretEnv...)
		cfg.Setup = &phaseConfig{Name: "setup", Args: p.Args, Env: env, Dir: s.Dir, WritePaths: writable}
		for _, kv := range p.SecretEnv {
			name, _, _ := strings.Cut(kv, "=")
			r.res.SecretEnv = append(r.res.SecretEnv, name)
		}
		for _, f := range p.SecretFiles {
			sc, err := readSecret(f)
			if err != nil {
				cfg.wipeSecrets()
				return nil, err
			}
			cfg.Setup.Secrets = append(cfg.Setup.Secrets, sc)
			r.res.SecretFiles = append(r.res.SecretFiles, f.Dst)
		}
	}
	return cfg, nil
}

// readSecret reads a secret file's content, as host root.
func readSecret(f SecretFile) (secretConfig, error) {
	file, err := os.Open(f.Src)
	if err != nil {
		return secretConfig{}, fmt.Errorf("sandbox: secret file: %w", err)
	}
	defer file.Close()
	st, err := file.Stat()
	if err != nil {
		return secretConfig{}, fmt.Errorf("sandbox: secret file: %w", err)
	}
	if !st.Mode().IsRegular() {
		return secretConfig{}, fmt.Errorf("sandbox: secret file %s is not a regular file: %w", f.Src, ErrInvalid)
	}
	data, err := io.ReadAll(io.LimitReader(file, MaxSecretFileSize+1))
	if err != nil {
		return secretConfig{}, fmt.Errorf("sandbox: secret file: %w", err)
	}
	if len(data) > MaxSecretFileSize {
		return secretConfig{}, fmt.Errorf("sandbox: secret file %s is larger than %d bytes: %w", f.Src, MaxSecretFileSize, ErrInvalid)
	}
	return secretConfig{Dst: f.Dst, Mode: uint32(st.Mode().Perm()), Data: data}, nil
}

// wipeSecrets overwrites the secret contents held in memory.
func (c *initConfig) wipeSecrets() {
	if c == nil || c.Setup == nil {
		return
	}
	for _, s := range c.Setup.Secrets {
		clear(s.Data)
	}
}

// send hands init its configuration (in a sealed memfd, which is also the
// signal to proceed) and the mount trees.
func (r *runner) send(sock int, cfg *initConfig, trees *treeSet) error {
	data, err := json.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("sandbox: encode init's config: %w", err)
	}
	mem, err := sealedMemfd("cairn-sandbox-config", data)
	clear(data)
	if err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	defer mem.Close()
	err = sendFDs(sock, append([]int{int(mem.Fd())}, trees.fds...))
	trees.close() // init has its copies; ours would pin the mounts
	if err != nil {
		return fmt.Errorf("sandbox: send init its mounts: %w", err)
	}
	return nil
}

// wait waits for init's end, killing the sandbox when the timeout passes or
// ctx ends, and collects init's reports.
func (r *runner) wait(ctx context.Context, cmd *exec.Cmd, g *cgroups.Group, reports <-chan report) error {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var timeout <-chan time.Time
	if d := r.spec.Timeout; d > 0 {
		t := time.NewTimer(time.Until(r.start.Add(d)))
		defer t.Stop()
		timeout = t.C
	}
	ctxDone := ctx.Done()
	var waitErr error
	exited := false
	for !exited || reports != nil {
		select {
		case rep, ok := <-reports:
			if !ok {
				reports = nil
				continue
			}
			r.handle(rep)
		case waitErr = <-done:
			exited = true
		case <-timeout:
			r.res.TimedOut = true
			timeout = nil
			g.Kill()
		case <-ctxDone:
			r.res.Canceled = true
			ctxDone = nil
			g.Kill()
		}
	}
	return waitErr
}

// handle records one report of init.
func (r *runner) handle(rep report) {
	switch rep.Type {
	case reportStarted:
		if rep.Phase == "agent" {
			r.res.StartLatency = time.Since(r.start)
		}
	case reportExit:
		if rep.Phase == "setup" {
			r.res.SetupExitCode = rep.Code
		} else {
			r.res.ExitCode, r.res.Signal = rep.Code, rep.Signal
			r.agentExited = true
		}
	case reportError:
		if r.initErr == nil {
			r.initErr = errorOfKind(rep.Kind, "sandbox: "+rep.Msg)
		}
	}
}

// outcome decides Run's error once init is gone.
func (r *runner) outcome(ctx context.Context, cmd *exec.Cmd, waitErr error) error {
	var exitErr *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exitErr) {
		return fmt.Errorf("sandbox: wait for init: %w", waitErr)
	}
	if !r.agentExited && !r.res.TimedOut && !r.res.Canceled && cmd.ProcessState != nil && r.initErr == nil &&
		r.res.SetupExitCode <= 0 {
		// Init died without a word: killed from outside (or by the OOM
		// killer), which ended the whole sandbox.
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			r.res.ExitCode, r.res.Signal = 128+int(ws.Signal()), unix.SignalName(ws.Signal())
		} else {
			r.res.ExitCode = cmd.ProcessState.ExitCode()
		}
	}
	switch {
	case r.initErr != nil:
		return r.initErr
	case r.res.Canceled:
		return fmt.Errorf("sandbox: %w: %w", ErrCanceled, ctx.Err())
	case r.spec.Setup != nil && r.res.SetupExitCode > 0:
		return fmt.Errorf("sandbox: setup phase %q exited with status %d; the agent phase did not run: %w",
			strings.Join(r.spec.Setup.Args, " "), r.res.SetupExitCode, ErrSetupFailed)
	}
	return nil
}

// cgroupName names a run's cgroup: cairn-run-TAG-RANDOM (see Spec.Tag).
func cgroupName(tag string) string {
	if tag == "" {
		return "cairn-run-" + randomHex(8)
	}
	return "cairn-run-" + tag + "-" + randomHex(8)
}
