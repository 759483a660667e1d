package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// initFailed is init's exit status when it could not build the sandbox or
// start a command (it reports why to Run before exiting).
const initFailed = 125

// MaybeInit runs the sandbox's init, or its command starter, when this
// process is one (Run re-executes the program as them), and then exits;
// in any other process it returns at once, having only compared argv[0]
// with two constants. Call it first thing in main, and in the TestMain of
// any test binary that calls Run.
func MaybeInit() {
	if len(os.Args) == 0 {
		return
	}
	var stage string
	switch os.Args[0] {
	case initArg0:
		stage = "init"
	case execArg0:
		stage = "exec"
	default:
		return
	}
	if os.Getenv(stageEnv) != stage {
		return
	}
	os.Unsetenv(stageEnv)
	// Both stages keep the main goroutine on one thread: the starter's
	// confinement (capabilities, Landlock) is per thread, and init's
	// cgroup namespace is unshared by this thread only.
	runtime.LockOSThread()
	if stage == "init" {
		os.Exit(initMain())
	}
	os.Exit(execMain())
}

// initProc is the sandbox's init: PID 1 of its pid namespace.
type initProc struct {
	sock int
	// current is the pid (and process group) of the running phase's
	// command, 0 between phases.
	current atomic.Int32
}

func initMain() int {
	// Not dumpable: the workload (same uid) can neither ptrace init nor
	// open its /proc files (its descriptors, memory, environment).
	unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0)
	in := &initProc{sock: initSockFD}
	if _, err := unix.FcntlInt(uintptr(initSockFD), unix.F_SETFD, unix.FD_CLOEXEC); err != nil {
		return initFailed
	}
	cfg, fds, err := receiveConfig(in.sock)
	if err != nil {
		in.fail(kindInit, err)
		return initFailed
	}
	if err := in.prepare(cfg, fds); err != nil {
		in.fail(kindInit, err)
		return initFailed
	}
	in.forwardSignals()
	if cfg.Setup != nil {
		code, sig, err := in.setupPhase(cfg.Setup)
		if err != nil {
			in.fail(kindOf(err), err)
			return initFailed
		}
		in.report(report{Type: reportExit, Phase: "setup", Code: code, Signal: sig})
		if code != 0 {
			return code
		}
	}
	code, sig, err := in.runPhase(&cfg.Agent)
	if err != nil {
		in.fail(kindOf(err), err)
		return initFailed
	}
	in.report(report{Type: reportExit, Phase: "agent", Code: code, Signal: sig})
	return code
}

// receiveConfig waits for Run's go-ahead: the config and the mount trees.
func receiveConfig(sock int) (*initConfig, []int, error) {
	fds, err := recvFDs(sock)
	if err != nil {
		return nil, nil, err
	}
	if len(fds) == 0 {
		return nil, nil, errors.New("no config received")
	}
	var cfg initConfig
	if err := readJSONFD(fds[0], &cfg); err != nil {
		closeAll(fds[1:])
		return nil, nil, fmt.Errorf("read the config: %w", err)
	}
	return &cfg, fds[1:], nil
}

// prepare builds the sandbox around init: its cgroup namespace rooted at
// the run's cgroups (Run has put init in them by now), the root, the
// hostname and the loopback interface.
func (in *initProc) prepare(cfg *initConfig, fds []int) error {
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return fmt.Errorf("new cgroup namespace: %w", err)
	}
	if err := buildRoot(cfg, fds); err != nil {
		return err
	}
	if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
		return fmt.Errorf("set the hostname: %w", err)
	}
	if cfg.HostNetwork {
		return nil
	}
	if err := loopbackUp(); err != nil {
		return fmt.Errorf("bring up lo: %w", err)
	}
	return nil
}

// setupPhase runs the setup command with its secret files in place, then
// kills whatever it left running and removes the secrets.
func (in *initProc) setupPhase(p *phaseConfig) (int, string, error) {
	sec, err := mountSecrets(p.Secrets)
	for i := range p.Secrets {
		clear(p.Secrets[i].Data)
	}
	if err != nil {
		killRemaining()
		if rerr := sec.remove(); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return -1, "", err
	}
	code, sig, err := in.runPhase(p)
	// Nothing of the setup phase may outlive it: a daemon it started would
	// keep the secret environment, or an open secret file.
	killRemaining()
	if rerr := sec.remove(); rerr != nil {
		return -1, "", errors.Join(err, rerr)
	}
	return code, sig, err
}

// runPhase starts a phase's command through the command starter and reaps
// every process until the command itself has exited.
func (in *initProc) runPhase(p *phaseConfig) (int, string, error) {
	data, err := json.Marshal(execConfig{Args: p.Args, Env: p.Env, Dir: p.Dir, WritePaths: p.WritePaths})
	if err != nil {
		return -1, "", err
	}
	mem, err := sealedMemfd("cairn-exec-config", data)
	if err != nil {
		return -1, "", err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		mem.Close()
		return -1, "", err
	}
	proc, err := os.StartProcess("/proc/self/exe", []string{execArg0}, &os.ProcAttr{
		Dir:   "/",
		Env:   []string{stageEnv + "=exec"},
		Files: []*os.File{os.Stdin, os.Stdout, os.Stderr, mem, pw},
		// A new session and process group: no controlling terminal (no
		// TIOCSTI into the caller's), and a group to forward signals to.
		Sys: &syscall.SysProcAttr{Setsid: true},
	})
	mem.Close()
	pw.Close()
	if err != nil {
		pr.Close()
		return -1, "", fmt.Errorf("start the %s phase: %w", p.Name, err)
	}
	defer proc.Release()
	in.current.Store(int32(proc.Pid))
	defer in.current.Store(0)

	// The status pipe closes empty when the command is executed (it is
	// close-on-exec), or carries why it could not be.
	status, _ := io.ReadAll(pr)
	pr.Close()
	if len(status) > 0 {
		reapUntil(proc.Pid)
		var f execFailure
		if json.Unmarshal(status, &f) != nil {
			f = execFailure{Kind: kindExec, Msg: string(status)}
		}
		return -1, "", &kindError{kind: sentinelOf(f.Kind), msg: fmt.Sprintf("%s phase: %s", p.Name, f.Msg)}
	}
	in.report(report{Type: reportStarted, Phase: p.Name})
	code, sig := exitStatus(reapUntil(proc.Pid))
	return code, sig, nil
}

// reapUntil reaps every child (orphans of the pid namespace included) until
// pid has exited, and returns pid's status.
func reapUntil(pid int) unix.WaitStatus {
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || got == pid {
			return ws
		}
	}
}

// killRemaining kills every other process of the pid namespace and reaps
// them all.
func killRemaining() {
	for {
		unix.Kill(-1, unix.SIGKILL)
		var ws unix.WaitStatus
		_, err := unix.Wait4(-1, &ws, 0, nil)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return // ECHILD: none left
		}
	}
}

// exitStatus is a shell-style exit code (128+n for signal n) and the
// signal's name.
func exitStatus(ws unix.WaitStatus) (int, string) {
	switch {
	case ws.Exited():
		return ws.ExitStatus(), ""
	case ws.Signaled():
		return 128 + int(ws.Signal()), unix.SignalName(ws.Signal())
	}
	return -1, ""
}

// forwardedSignals are passed on to the running command's process group.
var forwardedSignals = []os.Signal{unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2}

// forwardSignals passes the signals init receives to the running command's
// process group; when none runs, the terminating ones end init (and with it
// the sandbox).
func (in *initProc) forwardSignals() {
	ch := make(chan os.Signal, 16)
	signal.Notify(ch, forwardedSignals...)
	go func() {
		for s := range ch {
			sig := s.(syscall.Signal)
			if pid := in.current.Load(); pid > 0 {
				unix.Kill(-int(pid), sig)
				continue
			}
			if sig != unix.SIGUSR1 && sig != unix.SIGUSR2 {
				in.fail(kindInit, fmt.Errorf("init received %s before the command ran", unix.SignalName(sig)))
				os.Exit(128 + int(sig))
			}
		}
	}()
}

func (in *initProc) report(r report) {
	sendReport(in.sock, r)
}

func (in *initProc) fail(kind string, err error) {
	in.report(report{Type: reportError, Kind: kind, Msg: err.Error()})
}

// kindOf is the report kind of an error.
func kindOf(err error) string {
	switch {
	case errors.Is(err, ErrNotSupported):
		return kindNotSupported
	case errors.Is(err, ErrExec):
		return kindExec
	}
	return kindInit
}

// loopbackUp brings up lo in the sandbox's network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}
