// Command s3bench measures resuming a workspace from S3 on a machine with
// an empty cache, through the cairn binary, against a real S3 server
// (versitygw) on loopback: mount time, `find | wc -l`, `git status` of a
// 10k-file source tree with its git repository, reading every file cold and
// warm (next to the same on a local store), and the upload rate of a
// snapshot. `make bench` runs it. Needs root and /dev/fuse.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cairnfs/cairn/chunkstore/backend"
	s3be "github.com/cairnfs/cairn/chunkstore/backend/s3"
	"github.com/cairnfs/cairn/internal/scratchfs"
)

var (
	cairnBin   = flag.String("cairn", "bin/cairn", "the cairn binary")
	gatewayFl  = flag.String("versitygw", ".bin/versitygw", "the versitygw binary")
	workDir    = flag.String("dir", "/var/tmp", "where to put the S3 server's data, the source tree and cairn's state")
	upload     = flag.Int64("upload", 512<<20, "bytes of random data for the upload rate")
	scratch    = flag.Int64("scratch", 16<<30, "run on a fresh ext4 of this many bytes (loop-mounted under -dir; see internal/scratchfs); 0: on -dir's own filesystem")
	profile    = flag.String("profile", "", "write a CPU profile of the daemon that reads after warmup (and uploads) to this file")
	uploadOnly = flag.Bool("upload-only", false, "measure only the upload rate (and the S3 server's ceiling)")
	coldProf   = flag.String("cold-profile", "", "write a CPU profile of the daemon that mounts on an empty cache to this file, and stop after its cold find")
)

const (
	accessKey = "s3bench"
	secretKey = "s3bench-secret"
	region    = "us-east-1"
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "s3bench:", err)
		os.Exit(1)
	}
}

type row struct {
	what, value, target string
}

// rows collects the results and shows each on stderr as it comes.
type rows []row

func (rs *rows) add(what, value, target string) {
	fmt.Fprintf(os.Stderr, "  %s: %s\n", what, value)
	*rs = append(*rs, row{what, value, target})
}

func run() error {
	base, cleanup, err := scratchfs.WorkDir(*workDir, "cairn-s3bench-", *scratch)
	if err != nil {
		return err
	}
	defer cleanup()
	endpoint, stop, err := startGateway(base)
	if err != nil {
		return err
	}
	defer stop()
	bucket := "bench"
	client := awss3.New(awss3.Options{Region: region, BaseEndpoint: aws.String(endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(accessKey, secretKey, "")})
	if _, err := client.CreateBucket(context.Background(), &awss3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		return fmt.Errorf("create bucket: %w", err)
	}
	s3url := "s3://" + bucket + "/ws?endpoint=" + endpoint + "&region=" + region
	cairn := func(home, store string, args ...string) (string, error) {
		cmd := exec.Command(*cairnBin, args...)
		cmd.Env = append(os.Environ(), "CAIRN_HOME="+home, "CAIRN_STORE="+store,
			"AWS_ACCESS_KEY_ID="+accessKey, "AWS_SECRET_ACCESS_KEY="+secretKey, "AWS_EC2_METADATA_DISABLED=true")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("cairn %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return string(out), nil
	}

	var rs rows
	if *uploadOnly {
		home, mnt := filepath.Join(base, "u"), filepath.Join(base, "mntu")
		os.MkdirAll(mnt, 0o755)
		if _, err := cairn(home, s3url, "init"); err != nil {
			return err
		}
		if *profile != "" {
			os.Setenv("CAIRN_CPUPROFILE", *profile)
		}
		_, err := cairn(home, s3url, "mount", "src", mnt)
		os.Unsetenv("CAIRN_CPUPROFILE")
		if err != nil {
			return err
		}
		defer cairn(home, s3url, "unmount", "--no-wait", "src")
		if err := uploadRate(&rs, s3url, home, mnt, "src", "on a new workspace", true, func(home string, args ...string) (string, error) { return cairn(home, s3url, args...) }); err != nil {
			return err
		}
		return rs.print()
	}

	// The source tree: Go's src with a git repository, made by an agent in
	// a workspace on S3 (machine A), snapshotted, unmounted.
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return fmt.Errorf("go env GOROOT: %w", err)
	}
	tarball := filepath.Join(base, "src.tar")
	if out, err := exec.Command("tar", "-C", strings.TrimSpace(string(goroot)), "-cf", tarball, "src").CombinedOutput(); err != nil {
		return fmt.Errorf("tar of the Go tree: %v: %s", err, out)
	}
	homeA, mntA := filepath.Join(base, "a"), filepath.Join(base, "mnta")
	os.MkdirAll(mntA, 0o755)
	if _, err := cairn(homeA, s3url, "init"); err != nil {
		return err
	}
	if _, err := cairn(homeA, s3url, "mount", "src", mntA); err != nil {
		return err
	}
	start := time.Now()
	if out, err := exec.Command("sh", "-c", fmt.Sprintf("tar -C %s --strip-components=1 -xf %s && cd %s && git init -q && git add -A && git -c user.email=b@b -c user.name=b commit -qm tree",
		mntA, tarball, mntA)).CombinedOutput(); err != nil {
		cairn(homeA, s3url, "unmount", "src")
		return fmt.Errorf("make the source tree: %v: %s", err, out)
	}
	files, _ := exec.Command("sh", "-c", "find "+mntA+" -type f | wc -l").Output()
	if _, err := cairn(homeA, s3url, "snapshot", "--wait", "src"); err != nil {
		return err
	}
	rs.add(fmt.Sprintf("machine A: tar -x, git init/add/commit (%s files incl. .git), snapshot --wait", strings.TrimSpace(string(files))), dur(time.Since(start)), "")
	if _, err := cairn(homeA, s3url, "unmount", "src"); err != nil {
		return err
	}

	// Machine B, empty cache.
	homeB, mnt := filepath.Join(base, "b"), filepath.Join(base, "mnt")
	os.MkdirAll(mnt, 0o755)
	if *coldProf != "" {
		os.Setenv("CAIRN_CPUPROFILE", *coldProf)
	}
	start = time.Now()
	_, err = cairn(homeB, s3url, "mount", "src", mnt)
	os.Unsetenv("CAIRN_CPUPROFILE")
	if err != nil {
		return err
	}
	rs.add("cold mount (CLI, wall: daemon start, lease, store open)", dur(time.Since(start)), "<= 200 ms")
	defer cairn(homeB, s3url, "unmount", "--no-wait", "src")
	t, out, err := timed("sh", "-c", "find "+mnt+" | wc -l")
	if err != nil {
		return err
	}
	rs.add(fmt.Sprintf("cold find | wc -l (%s entries)", strings.TrimSpace(out)), dur(t), "<= 1 s")
	if *coldProf != "" {
		if _, err := cairn(homeB, s3url, "unmount", "--no-wait", "src"); err != nil {
			return err
		}
		return rs.print()
	}
	t, out, err = timed("git", "-C", mnt, "status", "--porcelain")
	if err != nil {
		return err
	}
	clean := "clean"
	if strings.TrimSpace(out) != "" {
		clean = fmt.Sprintf("NOT clean: %d lines", strings.Count(out, "\n"))
	}
	rs.add("cold git status ("+clean+")", dur(t), "<= 3 s")
	t, _, err = timed("sh", "-c", "tar -C "+mnt+" -cf - . | wc -c")
	if err != nil {
		return err
	}
	rs.add("read every file, first time (tar -cf - | wc -c)", dur(t), "")
	t, _, err = timed("sh", "-c", "tar -C "+mnt+" -cf - . | wc -c")
	if err != nil {
		return err
	}
	rs.add("read every file again", dur(t), "")

	// The same reads on a local store, resumed the same way (the tree
	// written on one machine, read on another), for comparison.
	homeL, homeL2, mntL := filepath.Join(base, "l"), filepath.Join(base, "l2"), filepath.Join(base, "mntl")
	os.MkdirAll(mntL, 0o755)
	local := filepath.Join(homeL, "store")
	if _, err := cairn(homeL, local, "init"); err != nil {
		return err
	}
	if _, err := cairn(homeL, local, "mount", "src", mntL); err != nil {
		return err
	}
	if out, err := exec.Command("sh", "-c", fmt.Sprintf("tar -C %s --strip-components=1 -xf %s && cd %s && git init -q && git add -A && git -c user.email=b@b -c user.name=b commit -qm tree",
		mntL, tarball, mntL)).CombinedOutput(); err != nil {
		cairn(homeL, local, "unmount", "src")
		return fmt.Errorf("make the source tree on the local store: %v: %s", err, out)
	}
	if _, err := cairn(homeL, local, "snapshot", "src"); err != nil {
		return err
	}
	if _, err := cairn(homeL, local, "unmount", "src"); err != nil {
		return err
	}
	if _, err := cairn(homeL2, local, "mount", "src", mntL); err != nil {
		return err
	}
	t, _, err = timed("sh", "-c", "tar -C "+mntL+" -cf - . | wc -c")
	cairn(homeL2, local, "unmount", "src")
	if err != nil {
		return err
	}
	rs.add("local store: read every file after a resume on another machine", dur(t), "")

	// S3, machine C: warm up, then mount and read every file once.
	homeC, mntC := filepath.Join(base, "c"), filepath.Join(base, "mntc")
	os.MkdirAll(mntC, 0o755)
	cairn(homeB, s3url, "unmount", "src") // its lease
	start = time.Now()
	if _, err := cairn(homeC, s3url, "warmup", "src"); err != nil {
		return err
	}
	rs.add("S3: cairn warmup of the head on a third machine", dur(time.Since(start)), "")
	if *profile != "" {
		os.Setenv("CAIRN_CPUPROFILE", *profile)
	}
	_, err = cairn(homeC, s3url, "mount", "src", mntC)
	os.Unsetenv("CAIRN_CPUPROFILE")
	if err != nil {
		return err
	}
	defer cairn(homeC, s3url, "unmount", "--no-wait", "src")
	t2, _, err := timed("sh", "-c", "tar -C "+mntC+" -cf - . | wc -c")
	if err != nil {
		return err
	}
	rs.add("S3: read every file after warmup", fmt.Sprintf("%s (%.2fx the local store)", dur(t2), t2.Seconds()/t.Seconds()), "within 10% of local")
	cairnC := func(home string, args ...string) (string, error) { return cairn(home, s3url, args...) }
	if err := uploadRate(&rs, s3url, homeC, mntC, "src", "on the daemon that just read the tree", false, cairnC); err != nil {
		return err
	}
	// The same on a workspace of its own (a fresh daemon), with the
	// server's ceiling next to it.
	mntU := filepath.Join(base, "mntu")
	os.MkdirAll(mntU, 0o755)
	if _, err := cairn(homeC, s3url, "mount", "upload", mntU); err != nil {
		return err
	}
	defer cairn(homeC, s3url, "unmount", "--no-wait", "upload")
	if err := uploadRate(&rs, s3url, homeC, mntU, "upload", "on a new workspace", true, cairnC); err != nil {
		return err
	}
	return rs.print()
}

// uploadRate measures a snapshot --wait of new random data on a mounted
// workspace, next to the S3 server's own ceiling: the same bytes PUT
// straight to it, in pack-sized objects, with the same parallelism.
func uploadRate(rs *rows, s3url, home, mnt, ws, where string, ceiling bool, cairn func(home string, args ...string) (string, error)) error {
	f, err := os.Create(filepath.Join(mnt, "random.bin"))
	if err != nil {
		return err
	}
	if _, err := io.CopyN(f, rand.Reader, *upload); err != nil {
		f.Close()
		return err
	}
	f.Close()
	start := time.Now()
	if _, err := cairn(home, "snapshot", "--wait", ws); err != nil {
		return err
	}
	el := time.Since(start)
	row := fmt.Sprintf("snapshot --wait of %d MiB of new random data, %s", *upload>>20, where)
	if !ceiling {
		rs.add(row, fmt.Sprintf("%.0f MB/s (%s)", float64(*upload)/1e6/el.Seconds(), dur(el)), ">= 200 MB/s")
		return nil
	}

	// The ceiling: the same bytes PUT through cairn's S3 backend (same
	// client, checksums and signing), 16 MiB objects, 4 at a time: what
	// the server takes on this machine, without chunking, packing or the
	// outbox.
	os.Setenv("AWS_ACCESS_KEY_ID", accessKey)
	os.Setenv("AWS_SECRET_ACCESS_KEY", secretKey)
	cfg, err := s3be.ParseURL(s3url)
	if err != nil {
		return err
	}
	cfg.Prefix = "raw"
	be, err := s3be.Open(context.Background(), cfg)
	if err != nil {
		return err
	}
	defer be.Close()
	const objSize, par = 16 << 20, 4
	buf := make([]byte, objSize)
	rand.Read(buf)
	n := int(*upload / objSize)
	start = time.Now()
	sem := make(chan struct{}, par)
	errs := make(chan error, n)
	for i := range n {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			_, err := be.Put(context.Background(), fmt.Sprintf("packs/00/%d", i), bytes.NewReader(buf), backend.Condition{})
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			return fmt.Errorf("raw PUT: %w", err)
		}
	}
	raw := time.Since(start)
	rs.add(fmt.Sprintf("the S3 server's ceiling: %d MiB in 16 MiB PUTs through the same backend, 4 at a time", *upload>>20), fmt.Sprintf("%.0f MB/s (%s)", float64(*upload)/1e6/raw.Seconds(), dur(raw)), "")
	rs.add(row, fmt.Sprintf("%.0f MB/s (%s, %.2fx the ceiling)", float64(*upload)/1e6/el.Seconds(), dur(el), raw.Seconds()/el.Seconds()), ">= 200 MB/s")
	return nil
}

func (rs rows) print() error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "S3 on loopback (versitygw)\tresult\ttarget")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", r.what, r.value, r.target)
	}
	return tw.Flush()
}

func dur(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%.0f ms", float64(d.Microseconds())/1000)
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

func timed(name string, args ...string) (time.Duration, string, error) {
	start := time.Now()
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		return 0, "", fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return time.Since(start), string(out), nil
}

// startGateway runs versitygw with a posix backend on a free loopback port.
func startGateway(base string) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	root := filepath.Join(base, "s3")
	os.MkdirAll(root, 0o755)
	cmd := exec.Command(*gatewayFl, "--port", addr, "--region", region, "--health", "/health", "--quiet", "posix", root)
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY_ID="+accessKey, "ROOT_SECRET_ACCESS_KEY="+secretKey)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("start versitygw (%s): %w", *gatewayFl, err)
	}
	stop := func() { cmd.Process.Kill(); cmd.Wait() }
	url := "http://" + addr
	for range 100 {
		if resp, err := http.Get(url + "/health"); err == nil {
			resp.Body.Close()
			return url, stop, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	stop()
	return "", nil, fmt.Errorf("versitygw did not answer on %s", addr)
}
