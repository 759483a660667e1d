package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSeed_HostBaseCopiesOnlyWhatTheSandboxCanRead checks the seeding
// filter used when the base is the host's root: files and directories the
// sandbox (an "other" user there) could not read are not copied into a
// persisted path, which the sandbox then owns.
func TestSeed_HostBaseCopiesOnlyWhatTheSandboxCanRead(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root (chown), and CI must not skip it")
		}
		t.Skip("needs root (chown)")
	}
	base := t.TempDir()
	home := filepath.Join(base, "home")
	mk := func(name string, mode os.FileMode, dir bool) {
		p := filepath.Join(home, name)
		var err error
		if dir {
			err = os.Mkdir(p, mode)
		} else {
			err = os.WriteFile(p, []byte(name), mode)
		}
		if err == nil {
			err = os.Chmod(p, mode)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(home, 0o755); err != nil {
		t.Fatal(err)
	}
	mk("public", 0o644, false)
	mk("secret", 0o600, false)
	mk("group-only", 0o640, false)
	mk("open-dir", 0o755, true)
	mk("open-dir/inner", 0o644, false)
	mk("closed-dir", 0o700, true)
	mk("closed-dir/inner", 0o644, false)
	mk("list-only", 0o751, true) // searchable, not readable: skipped whole
	if err := os.Symlink("secret", filepath.Join(home, "link")); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		hostBase bool
		want     []string
	}{
		{true, []string{"link", "open-dir", "open-dir/inner", "public"}},
		{false, []string{"closed-dir", "closed-dir/inner", "group-only", "link", "list-only", "open-dir", "open-dir/inner", "public", "secret"}},
	} {
		store := t.TempDir()
		storeFD, err := unix.Open(store, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		baseFD, err := unix.Open(base, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		err = seedPersist(context.Background(), storeFD, baseFD, "home", tc.hostBase, false)
		unix.Close(storeFD)
		unix.Close(baseFD)
		if err != nil {
			t.Fatalf("seed: %v", err)
		}
		var got []string
		root := filepath.Join(store, "home")
		filepath.Walk(root, func(p string, _ os.FileInfo, err error) error {
			if p != root && err == nil {
				rel, _ := filepath.Rel(root, p)
				got = append(got, rel)
			}
			return err
		})
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("hostBase=%v: copied %q, want %q", tc.hostBase, got, tc.want)
		}
		if fi, err := os.Stat(root); err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("hostBase=%v: the persisted directory itself: %v, %v", tc.hostBase, fi.Mode(), err)
		}
	}
}

func TestPersistPlan(t *testing.T) {
	binds, all := persistPlan([]string{"/usr/local", "/root/.cache", "/root", "/root-other", "/usr/local/share"})
	if want := []string{"/root", "/root-other", "/usr/local"}; !slices.Equal(binds, want) {
		t.Errorf("binds %q, want %q", binds, want)
	}
	if want := []string{"/root", "/root-other", "/root/.cache", "/usr/local", "/usr/local/share"}; !slices.Equal(all, want) {
		t.Errorf("all %q, want %q", all, want)
	}
}
