package main

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cairnfs/cairn/internal/fusetrace"
)

// sample is one workload on one target in one round.
type sample struct {
	value   float64
	elapsed time.Duration
	cpu     time.Duration
	reqs    fusetrace.Counts
}

// result is one workload on one target over all rounds.
type result struct {
	Workload string    `json:"workload"`
	Target   string    `json:"target"`
	Unit     string    `json:"unit"`  // "MB/s", "ops/s" (higher is better) or "s", "ms" (lower is better)
	Value    float64   `json:"value"` // the median over rounds
	Values   []float64 `json:"values,omitempty"`
	// FUSE targets: the median over rounds of the requests the kernel sent
	// during the timed part (all, and by opcode) and of the server's CPU
	// time (user + system, all threads); the CPU time per request is all
	// rounds' CPU time over all rounds' requests, given only when that CPU
	// time is at least minCPU (it is counted in 10 ms ticks).
	Requests         float64            `json:"requests,omitempty"`
	Replies          float64            `json:"replies,omitempty"` // requests ended (fusetrace.Counts)
	Ops              map[string]float64 `json:"ops,omitempty"`
	ServerCPUSeconds float64            `json:"server_cpu_s,omitempty"`
	CPUPerRequestUS  float64            `json:"cpu_per_request_us,omitempty"`
}

// minCPU is the least server CPU time (all rounds) a CPU time per
// request is computed from: 20 ticks of /proc's 10 ms.
const minCPU = 200 * time.Millisecond

// summarize makes the result of a workload's samples on one target.
func summarize(workload, target, unit string, ss []sample, fuse bool) result {
	r := result{Workload: workload, Target: target, Unit: unit}
	var reqs, replies, cpu []float64
	var sumReqs float64
	var sumCPU time.Duration
	ops := map[string][]float64{}
	for _, s := range ss {
		r.Values = append(r.Values, s.value)
		if !fuse {
			continue
		}
		n := float64(s.reqs.Requests())
		reqs = append(reqs, n)
		replies = append(replies, float64(s.reqs.Replies))
		cpu = append(cpu, s.cpu.Seconds())
		sumReqs += n
		sumCPU += s.cpu
		for op := range s.reqs.Ops {
			ops[op] = nil
		}
	}
	r.Value = median(r.Values)
	if !fuse {
		return r
	}
	for op := range ops {
		for _, s := range ss {
			ops[op] = append(ops[op], float64(s.reqs.Ops[op]))
		}
	}
	r.Requests, r.Replies, r.ServerCPUSeconds = median(reqs), median(replies), median(cpu)
	if sumReqs > 0 && sumCPU >= minCPU {
		r.CPUPerRequestUS = sumCPU.Seconds() * 1e6 / sumReqs
	}
	if len(ops) > 0 {
		r.Ops = map[string]float64{}
		for op, v := range ops {
			r.Ops[op] = median(v)
		}
	}
	return r
}

// median of xs (the mean of the middle two for an even count; 0 for none).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// slower is how many times slower x is than base: time over time, or
// rate over rate inverted ("" when either is missing).
func slower(x, base result) string {
	if x.Value == 0 || base.Value == 0 {
		return ""
	}
	if x.Unit == "s" || x.Unit == "ms" {
		return fmt.Sprintf("%.2fx", x.Value/base.Value)
	}
	return fmt.Sprintf("%.2fx", base.Value/x.Value)
}

func fmtValue(v float64) string {
	switch {
	case v == 0:
		return "-"
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1fk", v/1e3)
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// fmtCount prints a count (a median: maybe a half).
func fmtCount(v float64) string {
	if v >= 1e4 {
		return fmtValue(v)
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// report is everything fsbench measured, as printed and as JSON.
type report struct {
	Date    time.Time     `json:"date"`
	Command string        `json:"command"`
	Kernel  string        `json:"kernel"`
	Rounds  int           `json:"rounds"`
	Targets []targetState `json:"targets"`
	Results []result      `json:"results"`
	Cairn   []result      `json:"cairn_only,omitempty"` // snapshot and history verbs
}

type targetState struct {
	Name string `json:"name"`
	// NotAvailable says why the target did not run ("" if it did).
	NotAvailable string `json:"not_available,omitempty"`
}

func (rep *report) get(workload, target string) result {
	for _, r := range rep.Results {
		if r.Workload == workload && r.Target == target {
			return r
		}
	}
	return result{}
}

// floor is the FUSE floor to compare cairn with: passthrough_hp over
// io_uring if it ran, else plain passthrough_hp.
func (rep *report) floor() string {
	for _, name := range []string{"passthrough_hp+uring", "passthrough_hp"} {
		for _, t := range rep.Targets {
			if t.Name == name && t.NotAvailable == "" {
				return name
			}
		}
	}
	return ""
}

// print writes the tables: the medians with cairn's slowdown against ext4
// and the floor; requests and server CPU per request; the opcodes.
func (rep *report) print(w io.Writer) {
	var names, fuseNames []string
	for _, t := range rep.Targets {
		if t.NotAvailable != "" {
			fmt.Fprintf(w, "%s: not available: %s\n", t.Name, t.NotAvailable)
			continue
		}
		names = append(names, t.Name)
		if t.Name != "ext4" {
			fuseNames = append(fuseNames, t.Name)
		}
	}
	var workloads []string
	for _, r := range rep.Results {
		if !slices.Contains(workloads, r.Workload) {
			workloads = append(workloads, r.Workload)
		}
	}
	floor := rep.floor()
	fmt.Fprintf(w, "\nmedians of %d interleaved rounds (x: how many times slower cairn is; floor: %s)\n", rep.Rounds, cmp.Or(floor, "none"))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "workload\t%s\tunit\tcairn/ext4\tcairn/floor\t\n", strings.Join(names, "\t"))
	for _, wl := range workloads {
		row := []string{wl}
		unit := ""
		for _, n := range names {
			r := rep.get(wl, n)
			row = append(row, fmtValue(r.Value))
			unit = cmp.Or(unit, r.Unit)
		}
		c := rep.get(wl, "cairn")
		row = append(row, unit, slower(c, rep.get(wl, "ext4")), slower(c, rep.get(wl, floor)))
		fmt.Fprintln(tw, strings.Join(row, "\t")+"\t")
	}
	tw.Flush()

	if len(fuseNames) == 0 {
		return
	}
	fmt.Fprintf(w, "\nFUSE requests per run / server CPU per request (us)\n")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "workload\t%s\tcairn/floor CPU\t\n", strings.Join(fuseNames, "\t"))
	for _, wl := range workloads {
		row := []string{wl}
		for _, n := range fuseNames {
			r := rep.get(wl, n)
			cell := "-"
			if r.Requests > 0 {
				cell = fmtCount(r.Requests) + " / -"
			}
			if r.CPUPerRequestUS > 0 {
				cell = fmt.Sprintf("%s / %.1f", fmtCount(r.Requests), r.CPUPerRequestUS)
			}
			row = append(row, cell)
		}
		c, f := rep.get(wl, "cairn"), rep.get(wl, floor)
		ratio := ""
		if c.CPUPerRequestUS > 0 && f.CPUPerRequestUS > 0 {
			ratio = fmt.Sprintf("%.1fx", c.CPUPerRequestUS/f.CPUPerRequestUS)
		}
		fmt.Fprintln(tw, strings.Join(append(row, ratio), "\t")+"\t")
	}
	tw.Flush()

	fmt.Fprintf(w, "\nrequests by opcode (medians; those >= 1%% of a run)\n")
	for _, wl := range workloads {
		for _, n := range fuseNames {
			if ops := opsLine(rep.get(wl, n)); ops != "" {
				fmt.Fprintf(w, "  %-16s %-21s %s\n", wl, n, ops)
			}
		}
	}
	for _, r := range rep.Cairn {
		if len(rep.Cairn) > 0 && r.Workload == rep.Cairn[0].Workload {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%-32s %8.1f %s\n", r.Workload, r.Value, r.Unit)
	}
}

// opsLine lists a result's opcodes by count, without the FUSE_ prefix.
func opsLine(r result) string {
	ops := slices.SortedFunc(maps.Keys(r.Ops), func(a, b string) int {
		return cmp.Or(cmp.Compare(r.Ops[b], r.Ops[a]), cmp.Compare(a, b))
	})
	var parts []string
	for _, op := range ops {
		if r.Ops[op] >= r.Requests/100 && r.Ops[op] > 0 {
			parts = append(parts, fmt.Sprintf("%s %s", strings.TrimPrefix(op, "FUSE_"), fmtCount(r.Ops[op])))
		}
	}
	return strings.Join(parts, ", ")
}
