package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/daemon"
	cfs "github.com/cairnfs/cairn/fs"
)

// readyFDEnv names the file descriptor a detached daemon reports on: "ok",
// or "error KIND MESSAGE".
const readyFDEnv = "CAIRN_READY_FD"

type mountOptions struct {
	globals
	Workspace, Dir, From string
	Foreground           bool
	NoPassthrough        bool
	NoIDMap              bool
	Force                bool
	// Transport is the FUSE transport (--fuse-transport).
	Transport cfs.Transport
	// Quiet reports the mount on stderr, not stdout (cairn run: stdout
	// is the command's).
	Quiet bool
}

func newMountCommand() *cli.Command {
	return &cli.Command{
		Name:      "mount",
		Usage:     "mount a workspace (created if new) and serve it",
		ArgsUsage: "WORKSPACE DIR",
		Description: `Mounts WORKSPACE at DIR with FUSE and returns once the mount serves. A
workspace that does not exist yet is created: empty, or from --from SNAP (a
workspace name for its head, WORKSPACE@N, or a snapshot ID prefix). A
workspace that was mounted before on this machine continues from its
journal, including every write since its last snapshot, even if its daemon
was killed.

The daemon runs detached and logs to HOME/workspaces/WORKSPACE/daemon.log;
--foreground keeps it in the foreground (for service managers and
containers). It stops on ` + "`cairn unmount`" + ` or SIGTERM, flushing first.

A mount holds a lease on its workspace in the store, renewed while it
serves: a second mount elsewhere (another machine or state directory) is
refused with the holder's name and the lease's expiry. If that machine is
gone, wait for the lease to expire and mount with --force to take it over;
--force never takes a live lease.

The mount lets a sandbox (cairn run) bind it id-mapped, so that the
sandbox's root owns what is stored as uid 0 and stores what it creates as
uid 0 (Linux 6.12 and later; older kernels mount as usual). The kernel then
names the caller only in requests that create a file, and the daemon finds
the caller of the others in /proc: a process it cannot see there (in a pid
namespace other than the daemon's or below it) is treated as nobody.
--no-idmap turns this off (for a daemon in a container of its own).

--fuse-transport says how the kernel's requests reach the daemon: auto
(the default: FUSE over io_uring where the kernel offers it, else
/dev/fuse), uring (FUSE over io_uring: Linux 6.14 and later with
/sys/module/fuse/parameters/enable_uring Y; refused where unavailable) or
dev (read and write /dev/fuse).
` + "`cairn status`" + ` says which one a mount uses.

Examples:
   cairn mount agent-1 /workspace
   cairn mount --from agent-1@3 agent-1-retry /mnt/retry
   cairn mount --foreground agent-1 /workspace
   cairn mount --fuse-transport=dev agent-1 /workspace`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "from", Usage: "start a new workspace from snapshot `SNAP`"},
			&cli.BoolFlag{Name: "foreground", Usage: "serve in the foreground until SIGTERM or unmount"},
			&cli.BoolFlag{Name: "no-passthrough", Usage: "send all reads and writes through the daemon (no FUSE passthrough)"},
			&cli.BoolFlag{Name: "no-idmap", Usage: "do not let sandboxes bind the mount id-mapped (the kernel then names every request's caller)"},
			&cli.BoolFlag{Name: "force", Usage: "take over the workspace's lease if its holder let it expire"},
			&cli.StringFlag{Name: "fuse-transport", Value: string(cfs.TransportDefault), Usage: "how FUSE requests reach the daemon: `auto` (io_uring where available), uring (FUSE over io_uring) or dev (/dev/fuse)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 2 {
				return usageError{errors.New("mount takes WORKSPACE DIR")}
			}
			g, err := globalsFrom(c)
			if err != nil {
				return err
			}
			transport, err := cfs.ParseTransport(c.String("fuse-transport"))
			if err != nil {
				return usageError{fmt.Errorf("--fuse-transport: %w", err)}
			}
			return runMount(c.Context, mountOptions{globals: g, Workspace: c.Args().Get(0), Dir: c.Args().Get(1),
				From: c.String("from"), Foreground: c.Bool("foreground"), NoPassthrough: c.Bool("no-passthrough"), NoIDMap: c.Bool("no-idmap"), Force: c.Bool("force"),
				Transport: transport})
		},
	}
}

// logReserve is the space a detached daemon's log keeps allocated ahead of
// its end.
const logReserve = 1 << 20

func runMount(ctx context.Context, opts mountOptions) error {
	if opts.Foreground {
		return serveForeground(ctx, opts)
	}
	p := daemon.PathsOf(opts.Home, opts.Workspace)
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		return fmt.Errorf("state directory %s: %w", p.Dir, err)
	}
	logFile, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logFile.Close()
	logStart, err := logFile.Seek(0, io.SeekEnd)
	if err != nil {
		return err
	}
	// Blocks for what the daemon says, taken now: on a disk that fills
	// up later, its last words (a crash report included) still land.
	// Best effort: a filesystem without fallocate just does not get it.
	_ = unix.Fallocate(int(logFile.Fd()), unix.FALLOC_FL_KEEP_SIZE, logStart, logReserve)
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	args := []string{"--home", opts.Home, "--store", opts.Store, "--cache-size", strconv.FormatInt(max(opts.CacheSize, 0), 10), "mount", "--foreground"}
	if opts.CacheSize == 0 {
		args = slices.Delete(args, 4, 6) // the default
	}
	if opts.From != "" {
		args = append(args, "--from", opts.From)
	}
	if opts.NoPassthrough {
		args = append(args, "--no-passthrough")
	}
	if opts.NoIDMap {
		args = append(args, "--no-idmap")
	}
	if opts.Force {
		args = append(args, "--force")
	}
	if opts.Transport != "" {
		args = append(args, "--fuse-transport", string(opts.Transport))
	}
	args = append(args, "--", opts.Workspace, opts.Dir)
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), readyFDEnv+"=3")
	cmd.ExtraFiles = []*os.File{w}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return fmt.Errorf("start the daemon: %w", err)
	}
	w.Close()
	// The daemon reports on the pipe once the mount serves, or why it
	// could not; the pipe ends when it exits. Interrupted meanwhile
	// (SIGINT, SIGTERM), the starting daemon is stopped too.
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(r).ReadString('\n')
		ready <- strings.TrimSuffix(line, "\n")
	}()
	var line string
	select {
	case line = <-ready:
	case <-ctx.Done():
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case line = <-ready:
			if line == "ok" { // it served just before the signal, and now stops
				return fmt.Errorf("interrupted: the daemon of %s (pid %d) had just mounted it at %s; it unmounts and exits by itself (see %s)", opts.Workspace, cmd.Process.Pid, opts.Dir, p.Log)
			}
			cmd.Wait()
			return fmt.Errorf("interrupted: the daemon of %s stopped before the mount served; nothing is mounted at %s", opts.Workspace, opts.Dir)
		case <-time.After(10 * time.Second):
			return fmt.Errorf("interrupted: the daemon of %s (pid %d) was asked to stop before the mount served and has not yet; see %s", opts.Workspace, cmd.Process.Pid, p.Log)
		}
	}
	if line == "ok" {
		out := os.Stdout
		if opts.Quiet {
			out = os.Stderr
		}
		fmt.Fprintf(out, "mounted %s at %s (daemon pid %d, log %s)\n", opts.Workspace, opts.Dir, cmd.Process.Pid, p.Log)
		return cmd.Process.Release()
	}
	werr := cmd.Wait()
	if kind, msg, ok := strings.Cut(strings.TrimPrefix(line, "error "), " "); ok && strings.HasPrefix(line, "error ") {
		return daemon.ErrorOf(kind, msg)
	}
	// It died without a word (a crash, a signal): say how, and what it
	// logged last.
	how := "exited"
	if werr != nil {
		how = "ended (" + werr.Error() + ")"
	}
	if said := daemonSaid(p.Log, logStart); said != "" {
		return fmt.Errorf("the daemon %s before the mount served: %s (see %s)", how, said, p.Log)
	}
	return fmt.Errorf("the daemon %s before the mount served; see %s", how, p.Log)
}

// daemonSaid returns what a daemon that died at start wrote to its log
// from offset start on: the line of a panic or fatal error (a crash dump
// follows it), else its last line, or "".
func daemonSaid(path string, start int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(io.NewSectionReader(f, start, 1<<40), 1<<20))
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for _, l := range lines {
		if strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ") {
			return l
		}
	}
	return strings.TrimSpace(lines[len(lines)-1])
}

// serveForeground runs the daemon in this process.
func serveForeground(ctx context.Context, opts mountOptions) error {
	logger := log.New(os.Stderr, "", log.LstdFlags)
	ready := func(err error) {
		if err == nil {
			logger.Printf("cairn: %s mounted at %s", opts.Workspace, opts.Dir)
		}
	}
	if fd, ok := os.LookupEnv(readyFDEnv); ok {
		os.Unsetenv(readyFDEnv)
		n, _ := strconv.Atoi(fd)
		pipe := os.NewFile(uintptr(n), "ready")
		ready = func(err error) {
			defer pipe.Close()
			if err != nil {
				fmt.Fprintf(pipe, "error %s %s\n", daemon.KindOf(err), oneLine(err))
				return
			}
			io.WriteString(pipe, "ok\n")
		}
	}
	setDaemonMemoryLimit()
	if path := os.Getenv("CAIRN_CPUPROFILE"); path != "" { // for developers: profile the daemon
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if path := os.Getenv("CAIRN_TRACE"); path != "" { // for developers: the daemon's execution trace
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := trace.Start(f); err != nil {
			return err
		}
		defer trace.Stop()
	}
	if path := os.Getenv("CAIRN_MEMPROFILE"); path != "" { // for developers: the heap at unmount, and near its peak
		stop := watchHeapPeak(path + ".peak")
		defer func() {
			stop()
			if f, err := os.Create(path); err == nil {
				pprof.Lookup("heap").WriteTo(f, 0)
				f.Close()
			}
		}()
	}
	host, _ := os.Hostname()
	ttl, err := leaseTTL()
	if err != nil {
		return err
	}
	return daemon.Run(ctx, daemon.Config{
		Home: opts.Home, Store: opts.Store, Workspace: opts.Workspace, Dir: opts.Dir, From: opts.From,
		Host: host, Version: version, NoPassthrough: opts.NoPassthrough, NoIDMap: opts.NoIDMap, Force: opts.Force, Transport: opts.Transport, LeaseTTL: ttl, CacheSize: opts.CacheSize, Logf: logger.Printf,
	}, ready)
}

func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", " ") }

// watchHeapPeak writes a heap profile to path whenever the heap grows 10%
// past its largest size so far (checked every 100 ms), until stopped: the
// profile of the heap near its peak, for developers (CAIRN_MEMPROFILE).
func watchHeapPeak(path string) (stop func()) {
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		var peak uint64
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			metrics.Read(sample)
			if v := sample[0].Value.Uint64(); v > peak+peak/10 {
				peak = v
				if f, err := os.Create(path); err == nil {
					pprof.Lookup("heap").WriteTo(f, 0)
					f.Close()
				}
			}
		}
	}()
	return func() { close(done); <-ended }
}

// daemonMemoryLimit is the daemon's soft limit for Go's memory (unless
// GOMEMLIMIT sets another): past it the collector runs more often instead
// of letting the heap grow to twice what is live. A snapshot of 100k new
// files and 3 GiB with 8 writers at work peaked at 0.9-1.0 GiB of anonymous
// memory without it and 0.49 GiB with it, in the same time (fsbench -only
// memory). It is soft: a daemon that needs more gets more.
const daemonMemoryLimit = 512 << 20

func setDaemonMemoryLimit() {
	if _, ok := os.LookupEnv("GOMEMLIMIT"); !ok {
		debug.SetMemoryLimit(daemonMemoryLimit)
	}
}
