package sandbox_test

import (
	"slices"
	"testing"

	"github.com/cairnfs/cairn/sandbox"
)

// TestRun_RunFiles: both phases read the run files under /run; nobody in
// the sandbox can change, remove or add to them, and nothing else is in
// /run.
func TestRun_RunFiles(t *testing.T) {
	requireRoot(t)
	probe := `cat /run/cairn/ca.pem; echo
		stat -c '%a %s' /run/cairn/ca.pem /run/cairn/other
		(echo x >> /run/cairn/ca.pem) 2>/dev/null && echo appended
		rm -f /run/cairn/ca.pem 2>/dev/null && echo removed
		chmod 666 /run/cairn/ca.pem 2>/dev/null && echo chmodded
		(: > /run/new) 2>/dev/null && echo created
		find /run | sort | xargs echo`
	s := newSpec(t, probe)
	s.Setup = &sandbox.Phase{Args: []string{"/bin/sh", "-c", probe}}
	s.RunFiles = []sandbox.RunFile{
		{Path: "/run/cairn/ca.pem", Data: []byte("-----BEGIN CERTIFICATE-----")},
		{Path: "/run/cairn/other", Data: []byte("12345"), Mode: 0o640},
	}
	o := mustRun(t, s)
	phase := []string{"-----BEGIN CERTIFICATE-----", "444 27", "640 5", "/run /run/cairn /run/cairn/ca.pem /run/cairn/other"}
	if got, want := lines(o.stdout), append(slices.Clone(phase), phase...); !slices.Equal(got, want) {
		t.Fatalf("output %q\nwant %q\nstderr: %s", got, want, o.stderr)
	}
}

// TestRun_RunEmpty: without run files, /run is empty and read-only.
func TestRun_RunEmpty(t *testing.T) {
	o := mustRun(t, newSpec(t, `ls -A /run | wc -l; (: > /run/x) 2>/dev/null && echo created; true`))
	if got := lines(o.stdout); !slices.Equal(got, []string{"0"}) {
		t.Fatalf("output %q, want an empty read-only /run\nstderr: %s", got, o.stderr)
	}
}
