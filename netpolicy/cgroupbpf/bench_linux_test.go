package cgroupbpf

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// enterCgroup moves this whole process into cgroup, and back where it was
// at the end of the benchmark: sockets it then creates belong to cgroup.
func enterCgroup(b *testing.B, cgroup string) {
	b.Helper()
	orig, err := ownCgroup2()
	if err != nil {
		b.Fatal(err)
	}
	move := func(dir string) error {
		return os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0)
	}
	if err := move(cgroup); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := move(orig); err != nil {
			b.Errorf("move back to %s: %v", orig, err)
		}
	})
}

// BenchmarkConnect is a TCP connect and close (with RST, so that no
// TIME_WAIT piles up) to a loopback listener, from this process in a cgroup
// without programs ("none") and with the policy attached and the
// destination allowed by a rule ("policy"). The difference is the cost of
// connect4 plus the egress backstop on the SYN, the ACK and the RST. On a
// shared machine the difference of two noisy figures is noisier still, so
// "policy" also reports what the kernel measured of the programs
// themselves (BPF_ENABLE_STATS, while the benchmark runs): bpf-ns/op is
// their run time per connect, connect4-ns and egress-ns per run.
func BenchmarkConnect(b *testing.B) {
	needBPF(b)
	// The listener is created before the move: its sockets stay outside.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	b.Cleanup(func() { l.Close(); <-done })
	dst := l.Addr().(*net.TCPAddr).AddrPort()
	sa := &unix.SockaddrInet4{Port: int(dst.Port()), Addr: dst.Addr().As4()}

	for _, mode := range []string{"none", "policy"} {
		b.Run(mode, func(b *testing.B) {
			cg := newCgroup(b, "")
			var p *Programs
			if mode == "policy" {
				p = load(b, Config{Mode: ModePolicy}, cg,
					Rule{Prefix: prefix(lo4), Ports: []PortRange{Port(dst.Port())}, Protocols: TCP})
				stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
				if err != nil {
					b.Fatalf("enable BPF stats: %v", err)
				}
				b.Cleanup(func() { stats.Close() })
			}
			enterCgroup(b, cg)
			for b.Loop() {
				fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
				if err != nil {
					b.Fatal(err)
				}
				unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
				if err := unix.Connect(fd, sa); err != nil {
					b.Fatal(err)
				}
				unix.Close(fd)
			}
			if p != nil {
				reportProgramStats(b, p)
			}
		})
	}
}

// reportProgramStats reports the run time of connect4 and egress.
func reportProgramStats(b *testing.B, p *Programs) {
	var total time.Duration
	for _, pr := range p.progs {
		if pr.name != "connect4" && pr.name != "egress" {
			continue
		}
		st, err := pr.p.Stats()
		if err != nil {
			b.Fatal(err)
		}
		total += st.Runtime
		if st.RunCount > 0 {
			b.ReportMetric(float64(st.Runtime.Nanoseconds())/float64(st.RunCount), pr.name+"-ns")
		}
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "bpf-ns/op")
}
