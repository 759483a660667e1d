package integration

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// restoreReply is `cairn restore --json`.
type restoreReply struct {
	From   string `json:"from"`
	Before string `json:"before"`
	Paths  []struct {
		Path    string `json:"path"`
		Removed bool   `json:"removed"`
	} `json:"paths"`
	Snapshot string `json:"snapshot"`
}

// daemonGet GETs a path of a daemon's control API.
func daemonGet(t *testing.T, socket, path string) string {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}}}
	resp, err := c.Get("http://cairn" + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s %s %v", path, resp.Status, b, err)
	}
	return string(b)
}

// manifestUnder is manifest without inode numbers (restored entries get
// fresh ones) and ctimes, for the paths under sub.
func manifestUnder(t *testing.T, root, sub string) map[string]string {
	t.Helper()
	ino := regexp.MustCompile(` ino=\d+| ctime=\S+`)
	out := map[string]string{}
	for k, v := range manifest(t, filepath.Join(root, sub)) {
		out[k] = ino.ReplaceAllString(v, "")
	}
	return out
}

func TestHistory_Restore(t *testing.T) {
	in := newInstance(t)
	dir := in.mount("w")
	writeFiles(t, dir, map[string]string{"src/a.go": "package a\n", "src/sub/b.go": "package b\n", "README": "hi\n", "keep": "keep\n"})
	if err := os.Link(filepath.Join(dir, "src/a.go"), filepath.Join(dir, "src/sub/a-link.go")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a.go", filepath.Join(dir, "src/sym")); err != nil {
		t.Fatal(err)
	}
	id1 := strings.TrimSpace(in.must("snapshot", "w", "-m", "first"))
	srcAt1, readmeAt1 := manifestUnder(t, dir, "src"), manifestUnder(t, dir, "README")

	// Change the live state; read the files first so the kernel caches
	// their attributes and pages.
	for _, p := range []string{"src/a.go", "README"} {
		if _, err := os.ReadFile(filepath.Join(dir, p)); err != nil {
			t.Fatal(err)
		}
	}
	writeFiles(t, dir, map[string]string{"src/a.go": "package a // changed\n", "src/new.go": "new\n", "README": "changed\n", "extra": "x\n", "keep": "kept change\n"})
	if err := os.RemoveAll(filepath.Join(dir, "src/sub")); err != nil {
		t.Fatal(err)
	}
	open, err := os.Open(filepath.Join(dir, "README"))
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()

	// Mounted: paths relative to the root, or under the mount point.
	rep := decodeJSON[restoreReply](t, in.must("restore", "--json", "w@1", "src", filepath.Join(dir, "README"), "extra"))
	if rep.From != id1 || rep.Before == "" || rep.Snapshot != "" || len(rep.Paths) != 3 || !rep.Paths[1].Removed || rep.Paths[1].Path != "extra" {
		t.Fatalf("restore reply %+v", rep)
	}
	// The daemon's progress counters (what a terminal shows during a long
	// snapshot or restore) hold the restore's totals.
	prog := decodeJSON[struct {
		Op    string `json:"op"`
		Busy  bool   `json:"busy"`
		Files int    `json:"files"`
	}](t, daemonGet(t, in.record("w").Socket, "/v1/progress"))
	if prog.Op != "restore" || prog.Busy || prog.Files != 6 { // src, a.go, sym, sub, b.go (a-link.go is a.go), README
		t.Errorf("progress after the restore: %+v", prog)
	}
	diffManifests(t, "restored src", srcAt1, manifestUnder(t, dir, "src"))
	diffManifests(t, "restored README", readmeAt1, manifestUnder(t, dir, "README"))
	if b, _ := os.ReadFile(filepath.Join(dir, "README")); string(b) != "hi\n" {
		t.Errorf("README through the mount after restore = %q (a stale kernel cache?)", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "extra")); !os.IsNotExist(err) {
		t.Errorf("extra, not in the snapshot, still there: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "keep")); string(b) != "kept change\n" {
		t.Errorf("keep, not restored, = %q", b)
	}
	// A file open across the restore keeps its content, as after a rename
	// over it.
	if b := make([]byte, 64); true {
		n, _ := open.ReadAt(b, 0)
		if string(b[:n]) != "changed\n" {
			t.Errorf("a handle opened before the restore reads %q", b[:n])
		}
	}
	// The state before is a snapshot: the restore can be undone.
	if out := in.must("cat", rep.Before[:12]+":src/new.go"); out != "new\n" {
		t.Errorf("the state before lacks src/new.go: %q", out)
	}
	out := in.must("restore", rep.Before[:12], "src", "README", "extra")
	if !strings.Contains(out, "restored w from "+rep.Before[:12]) || !strings.Contains(out, "undo: cairn restore") {
		t.Errorf("restore output:\n%s", out)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "src/new.go")); string(b) != "new\n" {
		t.Errorf("undo did not bring src/new.go back: %q", b)
	}

	// Unmounted: restored through the journal, and snapshotted.
	in.must("unmount", "w")
	rep = decodeJSON[restoreReply](t, in.must("restore", "--json", "w@1", "src/sub/b.go"))
	if rep.Snapshot == "" {
		t.Fatalf("an offline restore made no snapshot: %+v", rep)
	}
	if out := in.must("cat", "w:src/sub/b.go"); out != "package b\n" {
		t.Errorf("head after an offline restore: src/sub/b.go = %q", out)
	}
	in.mountAt("w", dir)
	if b, _ := os.ReadFile(filepath.Join(dir, "src/sub/b.go")); string(b) != "package b\n" {
		t.Errorf("remounted after an offline restore: %q", b)
	}
	in.must("unmount", "w")
	// ... and into another workspace without a journal on this machine.
	in.must("fork", "w@1", "f")
	other := in.otherMachine()
	if out := other.must("restore", "w@2", "src/new.go", "--to", "f"); !strings.Contains(out, "snapshot ") {
		t.Errorf("restore --to f:\n%s", out)
	}
	if out := other.must("cat", "f:src/new.go"); out != "new\n" {
		t.Errorf("f:src/new.go = %q", out)
	}

	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"restore", "w@1"}, 2, "restore takes"},
		{[]string{"restore", "nope", "a"}, 3, "workspaces: f, w"},
		{[]string{"restore", "w@1", "missing"}, 3, "in neither snapshot"},
		{[]string{"restore", "w@1", "/"}, 2, "roll it back"},
		{[]string{"restore", "w@1", "src", "--to", "nope"}, 3, "does not exist"},
		{[]string{"restore", "w@1", "README/x"}, 1, "not a directory"},
	} {
		r := in.run(c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.msg) || strings.Count(strings.TrimSpace(r.stderr), "\n") > 0 {
			t.Errorf("cairn %s: exit %d, stderr %q; want exit %d and %q on one line", strings.Join(c.args, " "), r.code, r.stderr, c.code, c.msg)
		}
	}
}
