package integration

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// cairnBin is the binary under test, built once by TestMain.
var cairnBin string

func TestMain(m *testing.M) {
	if argv := os.Getenv(denyBPFEnv); argv != "" {
		// A child of TestRun_EgressRefusedWithoutBPF: become cairn with
		// bpf(2) denied.
		os.Unsetenv(denyBPFEnv)
		err := execDenyingBPF(strings.Split(argv, "\x1f"))
		fmt.Fprintln(os.Stderr, "exec cairn with bpf(2) denied:", err)
		os.Exit(1)
	}
	dir, err := os.MkdirTemp("", "cairn-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cairnBin = filepath.Join(dir, "cairn")
	build := exec.Command("go", "build", "-o", cairnBin, "github.com/cairnfs/cairn/cmd/cairn")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build cairn:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// result is one run of the binary.
type result struct {
	stdout, stderr string
	code           int
}

// cairn runs the binary with args and the given extra environment, with no
// inherited CAIRN_* or AWS_* variables.
func cairn(t *testing.T, env []string, args ...string) result {
	t.Helper()
	return runBinary(t, env, cairnBin, args...)
}

// runBinary runs bin with args and env (on top of PATH, a fresh HOME and no
// EC2 metadata lookups) and returns what it printed and its exit status.
func runBinary(t *testing.T, env []string, bin string, args ...string) result {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "AWS_EC2_METADATA_DISABLED=true"}, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run %s %v: %v", bin, args, err)
	}
	return r
}
