package sandbox_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

func TestRun_Writes(t *testing.T) {
	// /srv is persisted (it is small on the host); /root is not.
	writable := []string{"/workspace/w", "/tmp/w", "/dev/shm/w", "/srv/w"}
	denied := []string{"/etc/w", "/usr/w", "/usr/local/w", "/root/w", "/var/tmp/w", "/w", "/run/w", "/dev/w",
		"/proc/sys/kernel/hostname", "/sys/kernel/w", "/workspace/.cairn/w"}
	var script strings.Builder
	for _, p := range append(slices.Clone(writable), denied...) {
		script.WriteString("if echo x 2>/dev/null >" + p + "; then echo 'ok " + p + "'; else echo 'denied " + p + "'; " +
			"(echo x >" + p + ") 2>&1 | sed 's/^/  /'; fi\n")
	}
	s := newSpec(t, script.String())
	s.Persist = []string{"/srv"}
	o := mustRun(t, s)
	for _, p := range writable {
		if !strings.Contains(o.stdout, "ok "+p+"\n") {
			t.Errorf("writing %s failed:\n%s", p, o.stdout)
		}
	}
	for _, p := range denied {
		if !strings.Contains(o.stdout, "denied "+p+"\n") {
			t.Errorf("writing %s succeeded:\n%s", p, o.stdout)
		}
	}
	// Every denial is a read-only filesystem or a permission error.
	for _, l := range lines(o.stdout) {
		if strings.HasPrefix(l, "  ") && !strings.Contains(l, "Read-only file system") && !strings.Contains(l, "Permission denied") {
			t.Errorf("unexpected error: %s", l)
		}
	}
}

func TestRun_FreshTmp(t *testing.T) {
	requireRoot(t)
	host, err := os.CreateTemp("/tmp", "cairn-host-file-")
	if err != nil {
		t.Fatal(err)
	}
	host.Close()
	t.Cleanup(func() { os.Remove(host.Name()) })
	o := mustRun(t, newSpec(t, "ls -A /tmp; stat -c '%a %u' /tmp /dev/shm; test -e "+host.Name()+" && echo host-file-visible; true"))
	if got, want := lines(o.stdout), []string{"1777 0", "1777 0"}; !slices.Equal(got, want) {
		t.Fatalf("got %q, want an empty /tmp and /dev/shm, mode 1777, owned by the sandbox's root", got)
	}
}

func TestRun_Dev(t *testing.T) {
	o := mustRun(t, newSpec(t, `ls -A /dev; echo ---
		test -e /dev/fuse && echo fuse-present
		echo x >/dev/null && head -c 4 /dev/urandom | wc -c && head -c 4 /dev/zero | wc -c
		test -c /dev/pts/ptmx && echo ptmx-ok
		mknod /dev/shm/null2 c 1 3 2>/dev/null && echo mknod-worked; true`))
	out := strings.SplitN(o.stdout, "---\n", 2)
	want := []string{"fd", "full", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin", "stdout", "tty", "urandom", "zero"}
	if got := lines(out[0]); !slices.Equal(got, want) {
		t.Errorf("/dev has %q, want exactly %q", got, want)
	}
	if got, want := lines(out[1]), []string{"4", "4", "ptmx-ok"}; !slices.Equal(got, want) {
		t.Errorf("device checks %q, want %q", got, want)
	}
}

func TestRun_ProcAndSys(t *testing.T) {
	o := mustRun(t, newSpec(t, `
		wc -c < /proc/keys
		wc -c < /proc/timer_list
		ls -A /sys/fs/cgroup | wc -l
		ls -A /sys/firmware | wc -l
		ls /sys/class/net
		grep -c . /proc/self/mountinfo >/dev/null && awk '{print $5, $9}' /proc/self/mountinfo`))
	out := lines(o.stdout)
	if got, want := out[:5], []string{"0", "0", "0", "0", "lo"}; !slices.Equal(got, want) {
		t.Errorf("masked /proc/keys, /proc/timer_list sizes, /sys/fs/cgroup, /sys/firmware entries, /sys/class/net: %q, want %q", got, want)
	}
	// No host filesystem but the read-only binds of the base, the device
	// nodes and the workspace: no host proc, sysfs, cgroup, devpts.
	var procs int
	for _, l := range out[5:] {
		mnt, fstype, _ := strings.Cut(l, " ")
		switch {
		case fstype == "cgroup" || fstype == "cgroup2" || fstype == "tracefs":
			t.Errorf("host mount visible: %s", l)
		case fstype == "proc" && mnt == "/proc":
			procs++
		case fstype == "proc" && !strings.HasPrefix(mnt, "/proc/"):
			t.Errorf("procfs at %s", mnt)
		case fstype == "sysfs" && mnt != "/sys":
			t.Errorf("sysfs at %s", mnt)
		}
		if mnt == "/" && fstype != "tmpfs" {
			t.Errorf("root is %s, want the sandbox's tmpfs", fstype)
		}
	}
	if procs != 1 {
		t.Errorf("%d procfs mounts at /proc, want 1", procs)
	}
}

func TestRun_WorkspaceIDMapped(t *testing.T) {
	requireRoot(t)
	s := newSpec(t, `stat -c '%u:%g' /workspace /workspace/hostfile; cat /workspace/hostfile
		mkdir /workspace/dir && echo inside > /workspace/dir/inside && chmod 600 /workspace/hostfile`)
	if err := os.WriteFile(filepath.Join(s.Workspace, "hostfile"), []byte("from the host\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := mustRun(t, s)
	if got, want := lines(o.stdout), []string{"0:0", "0:0", "from the host"}; !slices.Equal(got, want) {
		t.Errorf("inside: %q, want %q (host root's files are the sandbox root's)", got, want)
	}
	if !o.res.WorkspaceIDMapped || o.res.WorkspaceIDMapError != "" {
		t.Errorf("result: id-mapped %v (%q), want true", o.res.WorkspaceIDMapped, o.res.WorkspaceIDMapError)
	}
	for _, name := range []string{"dir", "dir/inside"} {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(s.Workspace, name), &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != 0 || st.Gid != 0 {
			t.Errorf("%s is stored as %d:%d, want 0:0", name, st.Uid, st.Gid)
		}
	}
}

func TestRun_WorkspaceWithoutIDMap(t *testing.T) {
	requireRoot(t)
	// ramfs does not support id-mapped mounts: Run falls back to a plain
	// bind, where the sandbox's root is host uid 100000 and host root is
	// nobody.
	ws := t.TempDir()
	if err := unix.Mount("ramfs", ws, "ramfs", 0, "mode=0777"); err != nil {
		t.Skipf("cannot mount ramfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(ws, unix.MNT_DETACH) })
	if err := os.WriteFile(filepath.Join(ws, "hostfile"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := newSpec(t, "stat -c %u /workspace/hostfile; cat /workspace/hostfile 2>/dev/null || echo unreadable; : > /workspace/inside")
	s.Workspace = ws
	o := mustRun(t, s)
	if o.res.WorkspaceIDMapped || o.res.WorkspaceIDMapError == "" {
		t.Errorf("result: id-mapped %v (%q), want false with a reason", o.res.WorkspaceIDMapped, o.res.WorkspaceIDMapError)
	}
	if got, want := lines(o.stdout), []string{"65534", "unreadable"}; !slices.Equal(got, want) {
		t.Errorf("inside: %q, want %q", got, want)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(ws, "inside"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != 100000 {
		t.Errorf("file created inside is stored as uid %d, want 100000", st.Uid)
	}
}
