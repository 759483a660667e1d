package sandbox_test

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/sandbox"
)

func TestRun_SetupPhase(t *testing.T) {
	requireRoot(t)
	fileSecret := fmt.Sprintf("file-secret-%d", rand.Int64())
	envSecret := fmt.Sprintf("env-secret-%d", rand.Int64())
	src := filepath.Join(t.TempDir(), "netrc")
	if err := os.WriteFile(src, []byte(fileSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	marker := uniqueSleep()
	s := newSpec(t, `echo "agent env: [${API_TOKEN:-}] [$PUBLIC]"
		test -e /workspace/.netrc && echo agent-sees-netrc
		test -e /tmp/new/dir/token && echo agent-sees-token
		test -e /tmp/new && echo agent-sees-placeholder-dir
		cat /workspace/config.txt
		for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline; echo; done | grep -c "^sleep `+marker+`"
		true`)
	if err := os.WriteFile(filepath.Join(s.Workspace, "config.txt"), []byte("public config\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s.Env = []string{"PUBLIC=1"}
	s.Setup = &sandbox.Phase{
		Args: []string{"/bin/sh", "-c", `echo "setup env: [$API_TOKEN] [$PUBLIC]"
			cat /workspace/.netrc /workspace/config.txt /tmp/new/dir/token
			sleep ` + marker + ` &`},
		SecretEnv: []string{"API_TOKEN=" + envSecret},
		SecretFiles: []sandbox.SecretFile{
			{Src: src, Dst: "/workspace/.netrc"},     // missing: placeholder
			{Src: src, Dst: "/workspace/config.txt"}, // over an existing file
			{Src: src, Dst: "/tmp/new/dir/token"},    // missing parents too
		},
	}
	o := mustRun(t, s)
	want := []string{
		"setup env: [" + envSecret + "] [1]", fileSecret, fileSecret, fileSecret,
		"agent env: [] [1]", "public config", "0",
	}
	if got := lines(o.stdout); !slices.Equal(got, want) {
		t.Fatalf("output %q\nwant %q\nstderr: %s", got, want, o.stderr)
	}
	if o.res.SetupExitCode != 0 {
		t.Errorf("setup exit %d", o.res.SetupExitCode)
	}
	if got, want := o.res.SecretFiles, []string{"/workspace/.netrc", "/workspace/config.txt", "/tmp/new/dir/token"}; !slices.Equal(got, want) {
		t.Errorf("Result.SecretFiles %q, want %q", got, want)
	}
	if got, want := o.res.SecretEnv, []string{"API_TOKEN"}; !slices.Equal(got, want) {
		t.Errorf("Result.SecretEnv %q, want %q", got, want)
	}
	// Nothing of the secrets is in the workspace.
	filepath.WalkDir(s.Workspace, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		if p == filepath.Join(s.Workspace, ".netrc") {
			t.Errorf("placeholder %s left in the workspace", p)
		}
		if !d.IsDir() {
			data, _ := os.ReadFile(p)
			if strings.Contains(string(data), fileSecret) || strings.Contains(string(data), envSecret) {
				t.Errorf("a secret is in %s", p)
			}
		}
		return nil
	})
}

func TestRun_SetupFails(t *testing.T) {
	s := newSpec(t, ": > /workspace/agent-ran")
	s.Setup = &sandbox.Phase{Args: []string{"/bin/sh", "-c", "exit 5"}}
	o := run(t, s)
	if !errors.Is(o.err, sandbox.ErrSetupFailed) {
		t.Fatalf("Run = %v, want ErrSetupFailed", o.err)
	}
	if o.res.SetupExitCode != 5 || o.res.ExitCode != -1 {
		t.Errorf("setup exit %d, agent exit %d: want 5 and -1", o.res.SetupExitCode, o.res.ExitCode)
	}
	if _, err := os.Stat(filepath.Join(s.Workspace, "agent-ran")); !os.IsNotExist(err) {
		t.Errorf("the agent phase ran after a failed setup (stat: %v)", err)
	}
}

func TestRun_SecretFileNeedsWritablePlace(t *testing.T) {
	requireRoot(t)
	src := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(src, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := newSpec(t, ": > /workspace/agent-ran")
	s.Setup = &sandbox.Phase{Args: []string{"true"}, SecretFiles: []sandbox.SecretFile{{Src: src, Dst: "/etc/cairn-test-secret"}}}
	o := run(t, s)
	if !errors.Is(o.err, sandbox.ErrInit) {
		t.Fatalf("Run = %v, want ErrInit", o.err)
	}
	t.Log(o.err)
	if _, err := os.Stat(filepath.Join(s.Workspace, "agent-ran")); !os.IsNotExist(err) {
		t.Errorf("the agent phase ran (stat: %v)", err)
	}
}

func TestRun_SecretMovedBySetup(t *testing.T) {
	requireRoot(t)
	// The setup phase moves the directory holding a secret's bind: init
	// cannot find it where it put it, and must not run the agent phase with
	// the secret still mounted elsewhere.
	src := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(src, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := newSpec(t, ": > /workspace/agent-ran")
	s.Setup = &sandbox.Phase{
		Args:        []string{"/bin/sh", "-c", "mv /workspace/d /workspace/moved && ln -s /tmp /workspace/d"},
		SecretFiles: []sandbox.SecretFile{{Src: src, Dst: "/workspace/d/secret"}},
	}
	o := run(t, s)
	if !errors.Is(o.err, sandbox.ErrInit) {
		t.Fatalf("Run = %v, want ErrInit", o.err)
	}
	t.Log(o.err)
	if _, err := os.Stat(filepath.Join(s.Workspace, "agent-ran")); !os.IsNotExist(err) {
		t.Errorf("the agent phase ran (stat: %v)", err)
	}
}
