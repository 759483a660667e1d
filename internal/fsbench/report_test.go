package main

import (
	"bytes"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cairnfs/cairn/internal/fusetrace"
)

func TestParseStatCPU(t *testing.T) {
	// comm with a space and a ')': fields count from the last ')'.
	stat := "4242 (a b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 9 0 123 456 789"
	got, err := parseStatCPU([]byte(stat))
	if err != nil {
		t.Fatal(err)
	}
	if want := 3250 * time.Millisecond; got != want { // (250 + 75) ticks of 10 ms
		t.Errorf("parseStatCPU = %v, want %v", got, want)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) S 1 2 3 4 5 6 7 8 9 10 u 75 0"} {
		if _, err := parseStatCPU([]byte(bad)); err == nil {
			t.Errorf("parseStatCPU(%q): no error", bad)
		}
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		in   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

func TestSummarize(t *testing.T) {
	s := func(v float64, cpu time.Duration, lookups, creates uint64) sample {
		return sample{value: v, cpu: cpu, reqs: fusetrace.Counts{Ops: map[string]uint64{"FUSE_LOOKUP": lookups, "FUSE_CREATE": creates}}}
	}
	r := summarize("tar-x", "cairn", "s", []sample{
		s(3, 100*time.Millisecond, 900, 100),
		s(1, 50*time.Millisecond, 1900, 100),
		s(2, 150*time.Millisecond, 800, 100),
	}, true)
	// CPU per request: 300 ms over 3900 requests.
	if r.Value != 2 || r.Requests != 1000 || r.ServerCPUSeconds != 0.1 || r.Ops["FUSE_LOOKUP"] != 900 || r.Ops["FUSE_CREATE"] != 100 ||
		math.Abs(r.CPUPerRequestUS-300e3/3900) > 1e-9 {
		t.Errorf("summarize = %+v", r)
	}
	// Less CPU time than minCPU: no CPU time per request.
	if r := summarize("statfs", "cairn", "ops/s", []sample{s(1, minCPU-time.Millisecond, 10, 0)}, true); r.CPUPerRequestUS != 0 || r.Requests != 10 {
		t.Errorf("summarize under minCPU = %+v", r)
	}
	if r := summarize("tar-x", "ext4", "s", []sample{s(1, 0, 0, 0)}, false); r.Requests != 0 || r.Ops != nil {
		t.Errorf("summarize of a target without FUSE = %+v", r)
	}
}

func TestReport_Print(t *testing.T) {
	rep := &report{Rounds: 3, Targets: []targetState{{Name: "ext4"}, {Name: "passthrough_hp"}, {Name: "passthrough_hp+uring", NotAvailable: "no ring"}, {Name: "cairn"}}}
	rep.Results = []result{
		{Workload: "tar-x", Target: "ext4", Unit: "s", Value: 0.5},
		{Workload: "tar-x", Target: "passthrough_hp", Unit: "s", Value: 2, Requests: 1000, CPUPerRequestUS: 10, Ops: map[string]float64{"FUSE_LOOKUP": 990, "FUSE_STATFS": 1}},
		{Workload: "tar-x", Target: "cairn", Unit: "s", Value: 5, Requests: 800, CPUPerRequestUS: 40},
		{Workload: "create", Target: "ext4", Unit: "ops/s", Value: 100000},
		{Workload: "create", Target: "passthrough_hp", Unit: "ops/s", Value: 10000},
		{Workload: "create", Target: "cairn", Unit: "ops/s", Value: 4000, Requests: 3},
	}
	var b bytes.Buffer
	rep.print(&b)
	out := b.String()
	for _, want := range []string{
		`passthrough_hp\+uring: not available: no ring`,
		`floor: passthrough_hp\)`,
		`tar-x +0.50 +2.00 +5.00 +s +10.00x +2.50x`,         // cairn/ext4, cairn/floor
		`create +100.0k +10.0k +4000 +ops/s +25.00x +2.50x`, // rates, inverted
		`tar-x +1000 / 10.0 +800 / 40.0 +4.0x`,              // CPU per request, cairn/floor
		`tar-x +passthrough_hp +LOOKUP 990\n`,
		`create +- +3 / - +\n`, // counts, no CPU per request
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("the report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "STATFS") {
		t.Errorf("an opcode under 1%% of the run is listed:\n%s", out)
	}
}
