package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairnfs/cairn/sandbox"
	"github.com/cairnfs/cairn/sandbox/cgroups"
)

func TestRun_ExitStatus(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		code         int
		signal       string
	}{
		{"Zero", "exit 0", 0, ""},
		{"Three", "exit 3", 3, ""},
		{"SIGKILL", "kill -KILL $$", 128 + 9, "SIGKILL"},
		{"SIGTERM", "kill -TERM $$", 128 + 15, "SIGTERM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := run(t, newSpec(t, tc.script))
			if o.err != nil {
				t.Fatalf("Run: %v (stderr %q)", o.err, o.stderr)
			}
			if o.res.ExitCode != tc.code || o.res.Signal != tc.signal {
				t.Fatalf("exit %d %q, want %d %q", o.res.ExitCode, o.res.Signal, tc.code, tc.signal)
			}
			if o.res.TimedOut || o.res.Canceled || o.res.OOMKilled {
				t.Fatalf("result %+v: nothing should be flagged", o.res)
			}
		})
	}
}

func TestRun_Stdio(t *testing.T) {
	s := newSpec(t, "cat; echo to-stderr >&2; echo reopened >/dev/stdout; echo reopened-err >/dev/stderr")
	s.Stdin = strings.NewReader("from-stdin\n")
	o := mustRun(t, s)
	if got, want := o.stdout, "from-stdin\nreopened\n"; got != want {
		t.Errorf("stdout %q, want %q", got, want)
	}
	if got, want := o.stderr, "to-stderr\nreopened-err\n"; got != want {
		t.Errorf("stderr %q, want %q", got, want)
	}
}

func TestRun_Environment(t *testing.T) {
	const secret = "hunter2-not-for-the-sandbox"
	t.Setenv("CAIRN_TEST_SECRET_TOKEN", secret)

	t.Run("Exact", func(t *testing.T) {
		// env is executed directly: what it prints is exactly the
		// environment the sandbox gave it, without a PATH although the
		// command was found through the default one.
		s := newSpec(t, "")
		s.Args = []string{"env"}
		s.Env = []string{"A=1", "B=two words"}
		o := mustRun(t, s)
		if got, want := lines(o.stdout), s.Env; !slices.Equal(got, want) {
			t.Fatalf("environment %q, want exactly %q", got, want)
		}
	})
	t.Run("ProcEnviron", func(t *testing.T) {
		o := mustRun(t, newSpec(t, "cat /proc/self/environ; cat /proc/1/environ 2>/dev/null; true"))
		if strings.Contains(o.stdout, secret) || strings.Contains(o.stdout, "CAIRN_TEST") {
			t.Fatalf("the caller's environment reached the sandbox: %q", o.stdout)
		}
	})
}

func TestRun_Hostname(t *testing.T) {
	o := mustRun(t, newSpec(t, "hostname; cat /proc/sys/kernel/hostname"))
	if got, want := lines(o.stdout), []string{"cairn", "cairn"}; !slices.Equal(got, want) {
		t.Errorf("default hostname %q, want %q", got, want)
	}
	s := newSpec(t, "hostname")
	s.Hostname = "agent-7"
	if o := mustRun(t, s); strings.TrimSpace(o.stdout) != "agent-7" {
		t.Errorf("hostname %q, want agent-7", o.stdout)
	}
}

func TestRun_PidNamespace(t *testing.T) {
	o := mustRun(t, newSpec(t, "cat /proc/1/cmdline; echo; echo $$; for p in /proc/[0-9]*; do echo ${p#/proc/}; done"))
	out := lines(o.stdout)
	if got, want := strings.TrimRight(out[0], "\x00"), "cairn-sandbox-init"; got != want {
		t.Errorf("pid 1 is %q, want the sandbox's init %q", got, want)
	}
	// Only init and the shell: no host process is visible.
	pids, want := out[2:], []string{"1", out[1]}
	slices.Sort(pids)
	slices.Sort(want)
	if !slices.Equal(pids, want) {
		t.Fatalf("processes in /proc: %v; want only init and the shell, %v", pids, want)
	}
}

func TestRun_Identity(t *testing.T) {
	// Inside: root, no supplementary group.
	o := mustRun(t, newSpec(t, "id -u; id -g; grep '^Groups:' /proc/self/status"))
	if got, want := lines(o.stdout), []string{"0", "0", "Groups:"}; !slices.Equal(got, want) {
		t.Errorf("inside: uid, gid, groups %q, want %q", got, want)
	}

	// Outside: the workload's process is host uid 100000, and has no host
	// group either. Its host pid is found through the run's cgroup.
	marker := uniqueSleep()
	s := newSpec(t, "exec sleep "+marker)
	var seen <-chan []procInfo
	s.BeforeStart = func(g *cgroups.Group, pid int) error {
		seen = watchProcesses(g.Path(), marker, 1, true)
		return nil
	}
	o = run(t, s)
	if o.err != nil {
		t.Fatalf("Run: %v", o.err)
	}
	procs := <-seen
	if len(procs) != 1 {
		t.Fatalf("the workload was not seen in the cgroup (%d processes)", len(procs))
	}
	for key, want := range map[string]string{
		"Uid":    "100000\t100000\t100000\t100000",
		"Gid":    "100000\t100000\t100000\t100000",
		"Groups": "",
		"CapEff": "0000000000000000",
	} {
		if got := procs[0].status[key]; got != want {
			t.Errorf("host view of the workload: %s %q, want %q", key, got, want)
		}
	}
}

func TestRun_Capabilities(t *testing.T) {
	o := mustRun(t, newSpec(t, "grep -E '^(Cap[a-zA-Z]+|NoNewPrivs|Seccomp):' /proc/self/status"))
	want := map[string]string{
		"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
		"CapBnd": "0000000000000000", "CapAmb": "0000000000000000",
		"NoNewPrivs": "1", "Seccomp": "2",
	}
	got := map[string]string{}
	for _, l := range lines(o.stdout) {
		k, v, _ := strings.Cut(l, ":")
		got[k] = strings.TrimSpace(v)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
}

func TestRun_NoInheritedDescriptors(t *testing.T) {
	// The test binary has descriptors of its own open; none may reach the
	// workload. ls lists its own fds: 0, 1, 2 and the directory it reads.
	f, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	o := mustRun(t, newSpec(t, "ls /proc/self/fd"))
	if got, want := lines(o.stdout), []string{"0", "1", "2", "3"}; !slices.Equal(got, want) {
		t.Fatalf("descriptors %q, want %q", got, want)
	}
}

func TestRun_NewSession(t *testing.T) {
	// The command leads its own session, without a controlling terminal.
	o := mustRun(t, newSpec(t, `set -- $(cut -d' ' -f6,7 /proc/$$/stat); echo "$$ $1 $2"; cat /dev/tty 2>/dev/null || echo no-tty`))
	fields := strings.Fields(lines(o.stdout)[0])
	if fields[0] != fields[1] || fields[2] != "0" {
		t.Errorf("pid, session, tty_nr = %v: want pid == session and no terminal", fields)
	}
	if lines(o.stdout)[1] != "no-tty" {
		t.Errorf("/dev/tty opened: %q", o.stdout)
	}
}

func TestRun_ReapsZombies(t *testing.T) {
	// Orphans reparent to init, which must reap them: the loop ends only
	// when no zombie is left in the sandbox.
	o := mustRun(t, newSpec(t, `(true &); (true &); (sh -c 'true &' &);
		while grep -qs '^State:.*Z' /proc/[0-9]*/status; do sleep 0.01; done; echo reaped`))
	if strings.TrimSpace(o.stdout) != "reaped" {
		t.Fatalf("output %q", o.stdout)
	}
}

func TestRun_ForwardsSignals(t *testing.T) {
	requireRoot(t)
	s := newSpec(t, `trap 'echo got-TERM; exit 7' TERM; : > /workspace/ready; while :; do sleep 0.05; done`)
	ws := s.Workspace
	s.BeforeStart = func(g *cgroups.Group, pid int) error {
		go func() {
			waitForFile(filepath.Join(ws, "ready"))
			syscall.Kill(pid, syscall.SIGTERM) // to init, from the host
		}()
		return nil
	}
	o := run(t, s)
	if o.err != nil {
		t.Fatalf("Run: %v", o.err)
	}
	if o.res.ExitCode != 7 || strings.TrimSpace(o.stdout) != "got-TERM" {
		t.Fatalf("exit %d, stdout %q: want the trap's 7 and got-TERM", o.res.ExitCode, o.stdout)
	}
}

func TestRun_CommandNotFound(t *testing.T) {
	s := newSpec(t, "")
	s.Args = []string{"no-such-command-anywhere"}
	o := run(t, s)
	if !errors.Is(o.err, sandbox.ErrExec) {
		t.Fatalf("Run = %v, want ErrExec", o.err)
	}
	if o.res == nil || o.res.ExitCode != -1 {
		t.Fatalf("result %+v: want ExitCode -1", o.res)
	}
	s.Dir = "/no/such/dir"
	s.Args = []string{"true"}
	if o := run(t, s); !errors.Is(o.err, sandbox.ErrExec) {
		t.Fatalf("Run in a missing directory = %v, want ErrExec", o.err)
	}
}

func TestRun_BeforeStart(t *testing.T) {
	t.Run("SeesInitInTheCgroup", func(t *testing.T) {
		s := newSpec(t, "true")
		var procs string
		var initPid int
		s.BeforeStart = func(g *cgroups.Group, pid int) error {
			data, err := os.ReadFile(filepath.Join(g.Path(), "cgroup.procs"))
			procs, initPid = string(data), pid
			return err
		}
		mustRun(t, s)
		if got := strings.Fields(procs); !slices.Equal(got, []string{strconv.Itoa(initPid)}) {
			t.Fatalf("cgroup.procs %q at BeforeStart: want exactly init, %d", procs, initPid)
		}
	})
	t.Run("ErrorAborts", func(t *testing.T) {
		s := newSpec(t, ": > /workspace/ran")
		hookErr := errors.New("no BPF today")
		var cgDir string
		s.BeforeStart = func(g *cgroups.Group, pid int) error {
			cgDir = g.Path()
			return hookErr
		}
		o := run(t, s)
		if !errors.Is(o.err, hookErr) {
			t.Fatalf("Run = %v, want the hook's error", o.err)
		}
		if _, err := os.Stat(filepath.Join(s.Workspace, "ran")); !os.IsNotExist(err) {
			t.Fatalf("the workload ran although BeforeStart failed (stat: %v)", err)
		}
		if _, err := os.Stat(cgDir); !os.IsNotExist(err) {
			t.Fatalf("cgroup %s left behind (stat: %v)", cgDir, err)
		}
	})
}

func TestRun_Timeout(t *testing.T) {
	requireRoot(t)
	// The workload daemonizes a grandchild (double fork, new session) and
	// sleeps; the timeout must kill both. The timeout is a means here, not
	// an assertion: if the machine is so slow that it passes before both
	// processes were seen, the test tries again with a longer one.
	marker := uniqueSleep()
	for timeout := 2 * time.Second; ; timeout *= 2 {
		s := newSpec(t, fmt.Sprintf("(setsid sleep %s &); exec sleep %s", marker, marker))
		s.Timeout = timeout
		var cgDir string
		var seen <-chan []procInfo
		s.BeforeStart = func(g *cgroups.Group, pid int) error {
			cgDir = g.Path()
			seen = watchProcesses(cgDir, marker, 2, false)
			return nil
		}
		o := run(t, s)
		if o.err != nil {
			t.Fatalf("Run: %v", o.err)
		}
		sawBoth := len(<-seen) == 2
		if !o.res.TimedOut {
			t.Fatalf("result %+v: want TimedOut", o.res)
		}
		if _, err := os.Stat(cgDir); !os.IsNotExist(err) {
			t.Fatalf("cgroup %s left behind (stat: %v)", cgDir, err)
		}
		if left := hostProcesses(marker); len(left) > 0 {
			t.Fatalf("processes survived the timeout: %v", left)
		}
		if sawBoth {
			return
		}
		t.Logf("the timeout of %v passed before both processes started; again with a longer one", timeout)
	}
}

func TestRun_Cancel(t *testing.T) {
	requireRoot(t)
	marker := uniqueSleep()
	s := newSpec(t, "exec sleep "+marker)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.BeforeStart = func(g *cgroups.Group, pid int) error {
		seen := watchProcesses(g.Path(), marker, 1, false)
		go func() {
			<-seen
			cancel()
		}()
		return nil
	}
	res, err := sandbox.Run(ctx, s)
	if !errors.Is(err, sandbox.ErrCanceled) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want ErrCanceled and context.Canceled", err)
	}
	if res == nil || !res.Canceled {
		t.Fatalf("result %+v: want Canceled", res)
	}
	if left := hostProcesses(marker); len(left) > 0 {
		t.Fatalf("processes survived the cancellation: %v", left)
	}
}

func TestRun_Concurrent(t *testing.T) {
	// Runs in parallel share nothing: each gets only its own stdio.
	for i := range 4 {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			t.Parallel()
			o := mustRun(t, newSpec(t, "ls /proc/self/fd; hostname"))
			if got, want := lines(o.stdout), []string{"0", "1", "2", "3", "cairn"}; !slices.Equal(got, want) {
				t.Fatalf("output %q, want %q", got, want)
			}
		})
	}
}

func TestRun_NoDescriptorLeak(t *testing.T) {
	requireRoot(t)
	count := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	mustRun(t, newSpec(t, "true")) // warm up (the runtime's poller)
	before := count()
	mustRun(t, newSpec(t, "echo hi"))
	s := newSpec(t, "true")
	s.BeforeStart = func(*cgroups.Group, int) error { return errors.New("abort") }
	run(t, s)
	s = newSpec(t, "")
	s.Args = []string{"no-such-command"}
	run(t, s)
	s = newSpec(t, "true")
	s.Persist = []string{"/srv"}
	s.Setup = &sandbox.Phase{Args: []string{"false"}}
	run(t, s)
	if after := count(); after != before {
		t.Fatalf("%d descriptors open before the runs, %d after", before, after)
	}
}

func TestRun_InitUnreachable(t *testing.T) {
	// The workload shares its uid with init but can neither read init's
	// process files nor signal it. (It can list the numbers of init's
	// descriptors: /proc/1/fd belongs to the namespace's root.)
	o := mustRun(t, newSpec(t, `
		for f in environ mem root/etc/hostname exe; do
			cat /proc/1/$f >/dev/null 2>&1 && echo "read $f"
		done
		for d in root cwd; do ls /proc/1/$d/ >/dev/null 2>&1 && echo "listed $d"; done
		for fd in $(ls /proc/1/fd); do
			readlink /proc/1/fd/$fd >/dev/null 2>&1 && echo "readlink fd $fd"
			(: < /proc/1/fd/$fd) 2>/dev/null && echo "opened fd $fd"
		done
		for s in KILL TERM SEGV; do kill -$s 1 2>/dev/null && echo "signaled $s"; done
		echo done`))
	if got := strings.TrimSpace(o.stdout); got != "done" {
		t.Fatalf("init was reachable:\n%s", got)
	}
}

// TestRun_Network: by default the sandbox has a network namespace of its
// own with only lo; with HostNetwork it shares the host's, where it holds
// no capability: no raw socket, no interface change.
func TestRun_Network(t *testing.T) {
	o := mustRun(t, newSpec(t, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"))
	if got := lines(o.stdout); !slices.Equal(got, []string{"lo"}) {
		t.Errorf("interfaces %q, want only lo", got)
	}
	host, err := os.ReadFile("/proc/net/dev")
	if err != nil {
		t.Fatal(err)
	}
	s := newSpec(t, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; "+
		"python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)' 2>&1 | tail -1; "+
		"python3 -c 'import socket; socket.socket(socket.AF_PACKET, socket.SOCK_RAW)' 2>&1 | tail -1")
	s.HostNetwork = true
	o = mustRun(t, s)
	got := lines(o.stdout)
	if n := strings.Count(string(host), "\n") - 2; len(got) < n {
		t.Fatalf("HostNetwork: sandbox sees %q, the host has %d interfaces", got, n)
	}
	for _, l := range got[len(got)-2:] {
		if !strings.Contains(l, "PermissionError") {
			t.Errorf("HostNetwork: a raw socket was made (want PermissionError): %q", l)
		}
	}
}
