package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		cmdline := strings.Join(args, " ")
		if len(cmdline) > 300 {
			cmdline = cmdline[:300] + "..."
		}
		t.Fatalf("%s %s: %v\n%s", name, cmdline, err, out)
	}
	return string(out)
}

func needTool(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s is not installed (make tools installs it)", name)
		}
		t.Skipf("%s is not installed", name)
	}
}

// Real programs through the mount.
func TestMount_RealPrograms(t *testing.T) {
	in := newInstance(t)
	dir := in.mount("progs")

	t.Run("TarGoSourceTree", func(t *testing.T) {
		src := filepath.Join(goroot(), "src")
		archive := filepath.Join(t.TempDir(), "src.tar")
		run(t, "", nil, "tar", "-C", filepath.Dir(src), "-cf", archive, "src")
		run(t, dir, nil, "tar", "-xf", archive)
		run(t, "", nil, "diff", "-r", "--no-dereference", src, filepath.Join(dir, "src"))
		// And back out: tar -c of the mounted tree extracts identical.
		back := filepath.Join(t.TempDir(), "back.tar")
		run(t, dir, nil, "tar", "-cf", back, "src")
		out := t.TempDir()
		run(t, out, nil, "tar", "-xf", back)
		run(t, "", nil, "diff", "-r", "--no-dereference", src, filepath.Join(out, "src"))
		in.must("snapshot", "progs", "-m", "go tree")
		run(t, dir, nil, "rm", "-rf", "src")
	})
	t.Run("Git", func(t *testing.T) {
		repo := filepath.Join(dir, "repo")
		os.MkdirAll(filepath.Join(repo, "pkg"), 0o755)
		git(t, repo, "init", "-q", "-b", "main")
		for i := range 50 {
			os.WriteFile(filepath.Join(repo, "pkg", "f"+string(rune('a'+i%26))+".go"), []byte(strings.Repeat("package pkg\n", i+1)), 0o644)
		}
		git(t, repo, "add", "-A")
		git(t, repo, "commit", "-qm", "one")
		git(t, repo, "checkout", "-qb", "feature")
		os.WriteFile(filepath.Join(repo, "pkg", "new.go"), []byte("package pkg // new\n"), 0o644)
		git(t, repo, "add", "-A")
		git(t, repo, "commit", "-qm", "two")
		git(t, repo, "checkout", "-q", "main")
		if _, err := os.Stat(filepath.Join(repo, "pkg", "new.go")); !os.IsNotExist(err) {
			t.Fatalf("checkout main left new.go: %v", err)
		}
		git(t, repo, "gc", "-q", "--aggressive")
		git(t, repo, "fsck", "--strict")
		if out := git(t, repo, "status", "--porcelain"); out != "" {
			t.Fatalf("git status: %s", out)
		}
	})
	t.Run("GoBuildWithCacheInside", func(t *testing.T) {
		mod := filepath.Join(dir, "hello")
		os.MkdirAll(mod, 0o755)
		os.WriteFile(filepath.Join(mod, "go.mod"), []byte("module hello\n\ngo 1.22\n"), 0o644)
		os.WriteFile(filepath.Join(mod, "main.go"), []byte("package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello from cairn\") }\n"), 0o644)
		env := []string{"GOCACHE=" + filepath.Join(dir, "gocache"), "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local", "CGO_ENABLED=0"}
		run(t, mod, env, "go", "build", "-o", "hello", ".")
		if out := run(t, mod, nil, "./hello"); out != "hello from cairn\n" {
			t.Fatalf("built binary printed %q", out)
		}
		run(t, mod, env, "go", "vet", ".")
	})
	t.Run("SqliteWAL", func(t *testing.T) {
		needTool(t, "sqlite3")
		db := filepath.Join(dir, "app.db")
		run(t, "", nil, "sqlite3", db, "PRAGMA journal_mode=WAL; CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT);")
		for range 20 { // 20 transactions of 100 rows each
			run(t, "", nil, "sqlite3", db, "PRAGMA journal_mode=WAL; INSERT INTO t(v) WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<100) SELECT printf('row %d %.*c', x, x, 'x') FROM c;")
		}
		if out := run(t, "", nil, "sqlite3", db, "PRAGMA integrity_check; SELECT count(*) FROM t;"); out != "ok\n2000\n" {
			t.Fatalf("sqlite3: %q", out)
		}
		// The database as a snapshot holds it (after a checkpoint) intact.
		run(t, "", nil, "sqlite3", db, "PRAGMA wal_checkpoint(TRUNCATE);")
		id := strings.TrimSpace(in.must("snapshot", "progs"))
		fork := in.mount("progs-fork", "--from", id)
		if out := run(t, "", nil, "sqlite3", filepath.Join(fork, "app.db"), "PRAGMA integrity_check; SELECT count(*) FROM t;"); out != "ok\n2000\n" {
			t.Fatalf("sqlite3 in the snapshot: %q", out)
		}
	})
}

// goroot is the Go toolchain's root, from `go env GOROOT`.
func goroot() string {
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return "/usr/local/go"
	}
	return strings.TrimSpace(string(out))
}
