package sandbox_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/cairnfs/cairn/sandbox/cgroups"
)

func TestRun_PidsLimit(t *testing.T) {
	requireRoot(t)
	// A loop that tries to start 3000 background processes, far beyond the
	// limit: the forks beyond it fail, the loop ends, and everything it
	// started dies with the sandbox.
	marker := uniqueSleep()
	s := newSpec(t, fmt.Sprintf(`i=0; while [ $i -lt 3000 ]; do sleep %s 2>/dev/null & i=$((i+1)); done 2>/dev/null; echo looped`, marker))
	s.Limits = cgroups.Limits{Pids: 32}
	var cgDir string
	s.BeforeStart = func(g *cgroups.Group, pid int) error {
		cgDir = g.Path()
		return nil
	}
	o := run(t, s)
	if o.err != nil {
		t.Fatalf("Run: %v", o.err)
	}
	t.Logf("exit %d, stdout %q, stats %+v", o.res.ExitCode, o.stdout, o.res.Stats)
	if o.res.Stats.PidsLimitHits == 0 {
		t.Errorf("stats %+v: the pids limit was never hit", o.res.Stats)
	}
	if o.res.Stats.PidsPeak > 32 {
		t.Errorf("pids peak %d above the limit of 32", o.res.Stats.PidsPeak)
	}
	if left := hostProcesses(marker); len(left) > 0 {
		t.Errorf("processes left: %v", left)
	}
	if _, err := os.Stat(cgDir); !os.IsNotExist(err) {
		t.Errorf("cgroup %s left (stat: %v)", cgDir, err)
	}
}

func TestRun_MemoryLimit(t *testing.T) {
	// tail holds a whole "line" of zeros in memory: far beyond the limit.
	s := newSpec(t, "head -c 1G /dev/zero | tail -n 1 >/dev/null")
	s.Limits = cgroups.Limits{MemoryBytes: 64 << 20}
	o := run(t, s)
	if o.err != nil {
		t.Fatalf("Run: %v", o.err)
	}
	t.Logf("exit %d %s, stats %+v", o.res.ExitCode, o.res.Signal, o.res.Stats)
	if !o.res.OOMKilled || o.res.Stats.OOMKills == 0 {
		t.Fatalf("result %+v: want OOMKilled", o.res)
	}
	if o.res.ExitCode == 0 {
		t.Errorf("the hog succeeded under a 64 MiB limit")
	}
}
