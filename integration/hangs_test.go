package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cairnfs/cairn/chunkstore/backend/s3/s3test"
	"github.com/cairnfs/cairn/internal/s3fault"
	"github.com/cairnfs/cairn/internal/testenv"
)

// started is a run of the binary in the background.
type started struct {
	cmd            *exec.Cmd
	stdout, stderr lockedBuffer
	done           chan struct{} // closed when it has exited
}

// startCairn starts the binary with args and the instance's environment.
// The test kills it at cleanup if it still runs.
func (in *instance) startCairn(args ...string) *started {
	in.t.Helper()
	p := &started{cmd: exec.Command(cairnBin, args...), done: make(chan struct{})}
	p.cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + in.t.TempDir(), "AWS_EC2_METADATA_DISABLED=true"}, in.env()...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		in.t.Fatalf("start cairn %v: %v", args, err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	in.t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// wait waits for the run to end, at most limit (a generous bound that
// only catches a hang: not a speed test), and returns its exit code.
func (p *started) wait(t *testing.T, limit time.Duration, what string) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(limit):
		t.Fatalf("%s: still running after %v (a hang); stderr %q", what, limit, p.stderr.String())
		return -1
	}
}

// holdMountCopy starts a process in a mount namespace of its own (a copy
// of this one, as `unshare -m` and `cairn run` make), which holds a copy of
// every mount, dir's included, until the test ends.
func holdMountCopy(t *testing.T, dir string) int {
	t.Helper()
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatalf("unshare (util-linux) is needed: %v", err)
	}
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := cmd.Process.Pid
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		// unshare execs sleep once the namespace is made: then its
		// mountinfo is the copy's.
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); strings.HasSuffix(exe, "/sleep") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("unshare did not start sleep")
		}
	}
	if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid)); !bytes.Contains(b, []byte(" "+dir+" ")) {
		t.Fatalf("the namespace copy does not hold %s", dir)
	}
	return pid
}

// waitGone waits until process pid has ended (gone, or a zombie of one
// task waiting to be reaped), at most limit.
func waitGone(t *testing.T, pid int, limit time.Duration, what string) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !processEnded(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("%s (pid %d) has not ended after %v: %s", what, pid, limit, taskStates(pid))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// processEnded reports whether pid is gone or a zombie with no task left
// running (a killed process with a thread stuck in the kernel is a zombie
// leader with that thread in D state).
func processEnded(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return true
	}
	for _, task := range tasks {
		if s := taskState(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name())); s != 'Z' && s != 'X' && s != 0 {
			return false
		}
	}
	return true
}

func taskState(statPath string) byte {
	b, err := os.ReadFile(statPath)
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return 0
	}
	return b[i+2]
}

func taskStates(pid int) string {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	var out []string
	for _, task := range tasks {
		s := taskState(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		stack, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stack", pid, task.Name()))
		line := fmt.Sprintf("task %s state %c", task.Name(), s)
		if s == 'D' {
			line += "\n" + string(stack)
		}
		out = append(out, line)
	}
	return strings.Join(out, "; ")
}

// stuckCairns lists the processes of the binary under test (daemons and
// their helpers) with a task in D state.
func stuckCairns() []string {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	var out []string
	for _, p := range procs {
		if exe, _ := os.Readlink(p + "/exe"); exe != cairnBin {
			continue
		}
		tasks, _ := filepath.Glob(p + "/task/*/stat")
		for _, task := range tasks {
			if taskState(task) == 'D' {
				stack, _ := os.ReadFile(filepath.Join(filepath.Dir(task), "stack"))
				cmdline, _ := os.ReadFile(p + "/cmdline")
				environ, _ := os.ReadFile(p + "/environ")
				status, _ := os.ReadFile(p + "/status")
				ppid := ""
				for _, l := range strings.Split(string(status), "\n") {
					if strings.HasPrefix(l, "PPid") {
						ppid = l
					}
				}
				out = append(out, fmt.Sprintf("%s (%q, %s, env %q):\n%s", task, cmdline, ppid, environ, stack))
			}
		}
	}
	return out
}

// assertNothingLeft checks that the instance's mount of ws at dir left
// nothing behind: no mount, record, socket or lock holder.
func (in *instance) assertNothingLeft(ws, dir string) {
	in.t.Helper()
	if isMounted(dir) {
		in.t.Errorf("%s is still mounted", dir)
	}
	if rec := in.record(ws); rec != nil {
		in.t.Errorf("the mount record of %s is still there: %+v", ws, rec)
	}
	if _, err := os.Stat(filepath.Join(in.home, "run", ws+".sock")); !errors.Is(err, os.ErrNotExist) {
		in.t.Errorf("the control socket of %s is still there (%v)", ws, err)
	}
}

// Another mount namespace holds a copy of the mount (`unshare -m`; `cairn
// run` makes such namespaces): `cairn unmount` still returns, the daemon
// exits, and the copy's users get ENOTCONN instead of a hang.
func TestHangs_UnmountWithCopyInOtherNamespace(t *testing.T) {
	in := newInstance(t)
	dir := in.mount("ns")
	writeFiles(t, dir, map[string]string{"f": "kept\n"})
	pid := in.record("ns").PID
	holder := holdMountCopy(t, dir)

	um := in.startCairn("unmount", "ns")
	if code := um.wait(t, 3*time.Minute, "cairn unmount with a copy of the mount in another namespace"); code != 0 {
		t.Fatalf("unmount: exit %d, stdout %q, stderr %q", code, um.stdout.String(), um.stderr.String())
	}
	waitGone(t, pid, time.Minute, "the daemon")
	in.assertNothingLeft("ns", dir)
	// The copy in the other namespace: its connection is aborted.
	_, err := os.Stat(fmt.Sprintf("/proc/%d/root%s/f", holder, dir))
	if !errors.Is(err, syscall.ENOTCONN) {
		t.Errorf("stat through the other namespace's copy: %v, want ENOTCONN", err)
	}
	// The workspace mounts again, with its file.
	dir2 := in.mount("ns")
	if b, err := os.ReadFile(filepath.Join(dir2, "f")); err != nil || string(b) != "kept\n" {
		t.Errorf("after remount: %q, %v", b, err)
	}
}

// SIGTERM ends a `cairn unmount` that waits, at once, saying in what state
// things are: waiting for uploads to a dead S3 (the workspace stays mounted
// and serving), or waiting for the daemon to exit (detached, flushing).
func TestHangs_UnmountSIGTERM(t *testing.T) {
	srv := s3test.Start(t)
	in := newS3Instance(t, srv)
	dir := in.mount("term")
	writeFiles(t, dir, map[string]string{"a": "turn 1\n"})
	in.must("snapshot", "--wait", "term")
	srv.Stop(t)
	writeFiles(t, dir, map[string]string{"a": "turn 2\n"})
	if r := in.run("snapshot", "term"); r.code != 0 {
		t.Fatalf("snapshot with S3 down: exit %d, %s", r.code, r.stderr)
	}
	rec := in.record("term")

	// 1. Waiting for the uploads: the request is not done; SIGTERM leaves
	// the workspace mounted.
	um := in.startCairn("unmount", "term")
	for deadline := time.Now().Add(time.Minute); !strings.Contains(um.stderr.String(), "waiting for"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("unmount never said it waits for uploads: %q", um.stderr.String())
		}
	}
	um.cmd.Process.Signal(syscall.SIGTERM)
	if code := um.wait(t, time.Minute, "unmount after SIGTERM (uploads)"); code == 0 || !strings.Contains(um.stderr.String(), "interrupted") || !strings.Contains(um.stderr.String(), "still mounted") {
		t.Fatalf("unmount interrupted while waiting for uploads: exit %d, %q", code, um.stderr.String())
	}
	if !rec.alive() || !isMounted(dir) {
		t.Fatalf("after an interrupted unmount the workspace is not mounted (alive %v, mounted %v)", rec.alive(), isMounted(dir))
	}
	if b, err := os.ReadFile(filepath.Join(dir, "a")); err != nil || string(b) != "turn 2\n" {
		t.Fatalf("the mount after an interrupted unmount: %q, %v", b, err)
	}

	// 2. --no-wait: the daemon detaches and exits, giving its queued
	// uploads a grace period first; SIGTERM ends the wait for it.
	um = in.startCairn("unmount", "--no-wait", "term")
	time.Sleep(time.Second) // into the daemon's grace period
	um.cmd.Process.Signal(syscall.SIGTERM)
	if code, msg := um.wait(t, time.Minute, "unmount --no-wait after SIGTERM"), um.stderr.String(); code == 0 || !strings.Contains(msg, "interrupted") || !strings.Contains(msg, "exits by itself") {
		t.Fatalf("unmount --no-wait interrupted: exit %d, %q", code, msg)
	}
	// It does exit by itself, leaving nothing behind; the queue stays.
	waitGone(t, rec.PID, 2*time.Minute, "the daemon")
	in.assertNothingLeft("term", dir)
	if ents, _ := os.ReadDir(filepath.Join(in.home, "workspaces", "term", "outbox", "q")); len(ents) == 0 {
		t.Error("the outbox is empty after an unmount with S3 down")
	}
	srv.Restart(t)
}

// A daemon killed with SIGKILL in the middle of a snapshot of a large
// dirty file leaves nothing stuck in the kernel (no process in D state,
// no zombie with a live thread); `cairn unmount` cleans up and the next
// mount replays the journal. The workspace's root is large, so that a
// daemon that opened its own mount to syncfs it (a request it would
// answer itself) would be killed while its own request was being served;
// with passthrough off and the file mapped and dirty, the flush of the
// kernel's writes has real work to do when the kill lands.
func TestHangs_KillDuringSnapshot(t *testing.T) {
	in := newInstance(t)
	src := t.TempDir()
	for i := range 60000 {
		if err := os.WriteFile(filepath.Join(src, fmt.Sprintf("f%05d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	in.must("import", "k", src)
	dir := shortTempDir(t)
	const size = 16 << 20
	ms := time.Millisecond
	for i, c := range []struct {
		mode  []string
		delay time.Duration
	}{
		{nil, 0}, {nil, 2 * ms}, {nil, 5 * ms}, {nil, 10 * ms}, {nil, 20 * ms}, {nil, 50 * ms},
		{[]string{"--no-passthrough"}, 5 * ms}, {[]string{"--no-passthrough"}, 20 * ms}, {[]string{"--no-passthrough"}, 100 * ms},
	} {
		name := fmt.Sprintf("big-%d", i)
		in.mountAt("k", dir, c.mode...)
		pid := in.record("k").PID
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		want := bytes.Repeat([]byte(name+";"), size/len(name+";"))
		if _, err := f.Write(want); err != nil {
			t.Fatal(err)
		}
		m, err := syscall.Mmap(int(f.Fd()), 0, len(want), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; off < len(m); off += 4096 {
			m[off] ^= 0 // dirty every page (the content stays as written)
		}

		snap := in.startCairn("snapshot", "k")
		time.Sleep(c.delay)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		what := fmt.Sprintf("the daemon killed %v into a snapshot (%v)", c.delay, c.mode)
		snap.wait(t, 2*time.Minute, "cairn snapshot whose daemon was killed: "+what)
		waitGone(t, pid, time.Minute, what)
		syscall.Munmap(m)
		f.Close()
		if stuck := stuckCairns(); len(stuck) > 0 {
			fds, _ := filepath.Glob("/proc/[0-9]*/task/*/fd/*")
			for _, fd := range fds {
				if l, _ := os.Readlink(fd); l == "/dev/fuse" {
					cmdline, _ := os.ReadFile(strings.Join(strings.Split(fd, "/")[:3], "/") + "/cmdline")
					stuck = append(stuck, fmt.Sprintf("/dev/fuse held by %s %q", fd, cmdline))
				}
			}
			t.Fatalf("processes stuck in the kernel after %s:\n%s", what, strings.Join(stuck, "\n"))
		}
		if r := in.run("unmount", "k"); r.code != 0 || !strings.Contains(r.stdout, "stale") {
			t.Fatalf("unmount of the killed daemon's mount: exit %d, %q, %q", r.code, r.stdout, r.stderr)
		}
		in.assertNothingLeft("k", dir)
		// The next mount replays: every write(2) that returned is there.
		in.mountAt("k", dir, c.mode...)
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s after %s and a remount: %d bytes, %v; want %d bytes", name, what, len(got), err, len(want))
		}
		in.must("unmount", "k")
	}
	in.mountAt("k", dir)
	in.must("snapshot", "k")
}

// A refused second mount of a workspace (the same state directory, another
// mount point; another state directory; the same state directory from
// another pid namespace, where the first daemon's pid is not visible)
// touches nothing of the mount that holds it: its lease object, record and
// socket stay; status shows it mounted and its lease held; it snapshots.
func TestHangs_RefusedMountKeepsLease(t *testing.T) {
	in := newInstance(t)
	dir := in.mount("held")
	leasePath := filepath.Join(in.store, "leases", "held")
	before := readLease(t, leasePath)
	rec := in.record("held")
	other := in.otherMachine()

	pidns := []string{"unshare", "-p", "-f", "--mount-proc", cairnBin}
	for _, c := range []struct {
		name string
		in   *instance
		cmd  []string // a prefix before the cairn arguments; nil: run cairn
	}{
		{"SameHome", in, nil},
		{"OtherHome", other, nil},
		{"SameHomeOtherPIDNamespace", in, pidns},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"mount", "held", shortTempDir(t)}
			var r result
			if c.cmd == nil {
				r = c.in.run(args...)
			} else {
				r = runBinary(t, c.in.env(), c.cmd[0], append(c.cmd[1:], args...)...)
			}
			if r.code == 0 {
				t.Fatalf("a second mount was not refused: %q", r.stdout)
			}
			if after := readLease(t, leasePath); after != before {
				t.Fatalf("the holder's lease changed hands: before %+v, after %+v", before, after)
			}
			if got := in.record("held"); got == nil || *got != *rec || !got.alive() {
				t.Fatalf("the holder's record changed: %+v, want %+v", got, rec)
			}
			if _, err := os.Stat(rec.Socket); err != nil {
				t.Fatalf("the holder's socket: %v", err)
			}
			st := decodeJSON[[]struct {
				State string `json:"state"`
				Lease *struct {
					State string `json:"state"`
				} `json:"lease"`
			}](t, in.must("status", "--json", "held"))
			if len(st) != 1 || st[0].State != "mounted" || st[0].Lease == nil || st[0].Lease.State != "held" {
				t.Fatalf("status after the refused mount: %+v", st)
			}
			t.Logf("refused: %s", strings.TrimSpace(r.stderr))
		})
	}
	// The holder commits, and its lease is still its own.
	writeFiles(t, dir, map[string]string{"after": "refusals\n"})
	in.must("snapshot", "held")
	if after := readLease(t, leasePath); after != before {
		t.Fatalf("the holder's lease changed hands: before %+v, after %+v", before, after)
	}
}

// leaseOwner is what identifies one holding of a lease (renewals change
// the times only).
type leaseOwner struct {
	Holder struct {
		ID  string `json:"id"`
		PID int    `json:"pid"`
	} `json:"holder"`
	Nonce      string `json:"nonce"`
	Generation uint64 `json:"generation"`
}

func readLease(t *testing.T, path string) leaseOwner {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the lease object: %v", err)
	}
	var l leaseOwner
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatalf("the lease object %s: %v", b, err)
	}
	return l
}

// A snapshot holds what was written through a shared mapping and not yet
// synced, with passthrough (the pages are the staging file's) and without
// (the daemon has a helper process fsync each file open for writing, and
// so wait until the kernel's WRITEs of its dirty pages are answered): the
// daemon's flush of the kernel skips nothing. Several files of several
// MiB, dirtied again in each round, keep the kernel's write-back busy
// while the snapshot starts: a flush that returned before the daemon
// answered (as syncfs(2) does) failed here in about one round out of
// three.
func TestHangs_SnapshotHoldsMappedWrites(t *testing.T) {
	in := newInstance(t)
	const files, size, rounds = 4, 4 << 20, 6
	for _, mode := range [][]string{nil, {"--no-passthrough"}} {
		ws := "mapped"
		if mode != nil {
			ws = "mapped-np"
		}
		dir := in.mount(ws, mode...)
		maps := make([][]byte, files)
		for i := range maps {
			f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("m%d", i)), os.O_RDWR|os.O_CREATE, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if err := f.Truncate(size); err != nil {
				t.Fatal(err)
			}
			m, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
			if err != nil {
				t.Fatal(err)
			}
			defer syscall.Munmap(m)
			maps[i] = m
		}
		for r := range rounds {
			want := make([]string, files)
			for i, m := range maps {
				line := fmt.Sprintf("%s round %d file %d\n", ws, r, i)
				want[i] = string(bytes.Repeat([]byte(line), size/len(line)+1)[:size])
				copy(m, want[i])
			}
			id := strings.TrimSpace(in.must("snapshot", ws))
			for i := range maps {
				if got := in.must("cat", fmt.Sprintf("%s:m%d", id, i)); got != want[i] {
					at := 0
					for at < min(len(got), len(want[i])) && got[at] == want[i][at] {
						at++
					}
					t.Fatalf("%v, round %d: the snapshot taken with m%d mapped and dirty holds %d bytes, the first different at offset %d (%q), want the mapped writes (%q)",
						mode, r, i, len(got), at, got[at:min(at+16, len(got))], want[i][at:min(at+16, len(want[i]))])
				}
			}
		}
	}
}

// SIGTERM ends a `cairn mount` whose daemon is still starting (here: its
// lease takes forever to read), stops that daemon, and says that nothing
// is mounted.
func TestHangs_MountSIGTERM(t *testing.T) {
	srv := s3test.Start(t)
	proxy := s3fault.Start(t, srv.Endpoint)
	testenv.NeedRoot(t, "FUSE mounts", true)
	in := &instance{t: t, home: shortTempDir(t),
		store: "s3://" + srv.NewBucket(t) + "/ws?endpoint=" + proxy.URL() + "&region=" + srv.Region,
		extra: []string{"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey}}
	t.Cleanup(in.unmountAll)
	in.must("init")
	proxy.Inject(s3fault.Fault{Kind: s3fault.Latency, Delay: 10 * time.Minute, Match: s3fault.Match{KeyContains: "leases/"}})
	dir := shortTempDir(t)
	mnt := in.startCairn("mount", "slow", dir)
	lock := filepath.Join(in.home, "workspaces", "slow", "lock")
	for deadline := time.Now().Add(time.Minute); !flocked(lock); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the daemon never started: %q", mnt.stderr.String())
		}
	}
	mnt.cmd.Process.Signal(syscall.SIGTERM)
	code := mnt.wait(t, time.Minute, "cairn mount after SIGTERM")
	if msg := mnt.stderr.String(); code == 0 || !strings.Contains(msg, "interrupted") || !strings.Contains(msg, "nothing is mounted") {
		t.Fatalf("mount interrupted while its daemon starts: exit %d, %q", code, msg)
	}
	for deadline := time.Now().Add(time.Minute); flocked(lock); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the starting daemon did not stop")
		}
	}
	in.assertNothingLeft("slow", dir)
	proxy.Clear()
	in.mountAt("slow", dir)
}

// flocked reports whether a process holds an flock of path.
func flocked(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		return true
	}
	unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return false
}
