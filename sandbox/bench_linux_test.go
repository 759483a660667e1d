package sandbox_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/cairnfs/cairn/sandbox"
	"github.com/cairnfs/cairn/sandbox/cgroups"
)

// BenchmarkStart runs /bin/true in a sandbox. ns/op is a whole run (start,
// command, teardown); start-ms/op is Result.StartLatency, from Run's call to
// the command's execve (the target is 100 ms).
func BenchmarkStart(b *testing.B) {
	for _, bc := range []struct {
		name   string
		limits cgroups.Limits
	}{
		{"NoLimits", cgroups.Limits{}},
		{"Limits", cgroups.Limits{MemoryBytes: 512 << 20, Pids: 256, CPUs: 1}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			requireRoot(b)
			ws := b.TempDir()
			var start time.Duration
			for b.Loop() {
				res, err := sandbox.Run(context.Background(), &sandbox.Spec{
					Args: []string{"/bin/true"}, Workspace: ws, Limits: bc.limits, Stdout: io.Discard, Stderr: io.Discard,
				})
				if err != nil || res.ExitCode != 0 {
					b.Fatalf("Run: %v, %+v", err, res)
				}
				start += res.StartLatency
			}
			b.ReportMetric(start.Seconds()*1000/float64(b.N), "start-ms/op")
		})
	}
}
