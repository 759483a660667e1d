package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cairnfs/cairn/sandbox"
)

// unprivilegedEnv makes the test binary try a sandbox as an ordinary user.
const unprivilegedEnv = "CAIRN_SANDBOX_TEST_UNPRIVILEGED"

// runUnprivileged runs a sandbox whose command would leave a marker file,
// and reports how Run failed.
func runUnprivileged() int {
	marker := os.Getenv(unprivilegedEnv)
	_, err := sandbox.Run(context.Background(), &sandbox.Spec{
		Args: []string{"/bin/sh", "-c", "touch " + marker}, Workspace: filepath.Dir(marker)})
	switch {
	case err == nil:
		fmt.Println("ran")
	case errors.Is(err, sandbox.ErrNotSupported):
		fmt.Println("refused:", err)
	default:
		fmt.Println("other error:", err)
	}
	return 0
}

// TestRun_RefusesWithoutProtections: where the sandbox cannot be built as
// specified (here: not host root, so no id mapping, cgroups or mounts),
// Run refuses with ErrNotSupported and runs nothing; it never falls back
// to less confinement.
func TestRun_RefusesWithoutProtections(t *testing.T) {
	requireRoot(t) // to start the child as another user
	dir := t.TempDir()
	os.Chmod(dir, 0o777)
	marker := filepath.Join(dir, "ran")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The test binary sits in a directory only root may search: run it
	// through a descriptor opened here.
	f, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command("/proc/self/fd/3", "-test.run=^$")
	cmd.ExtraFiles = []*os.File{f}
	cmd.Env = []string{unprivilegedEnv + "=" + marker}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.HasPrefix(string(out), "refused:") || !strings.Contains(string(out), "root") {
		t.Errorf("unprivileged Run: %q, want a refusal that says why (ErrNotSupported)", out)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the command ran")
	}
}
