package s3test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cairnfs/cairn/chunkstore/backend/s3"
)

// EnvBinary names the environment variable that points at a versitygw
// binary, overriding the search in <repo>/.bin and $PATH.
const EnvBinary = "CAIRN_VERSITYGW"

const (
	healthPath   = "/health"
	readyTimeout = 10 * time.Second
	maxLaunches  = 3
)

// Server is a running versitygw with a posix backend on a temporary
// directory. Its fields describe how to reach it; treat them as read-only.
type Server struct {
	// Endpoint is the base URL, "http://127.0.0.1:PORT".
	Endpoint string
	// Region is the region the server signs for.
	Region string
	// AccessKey and SecretKey are the root account's credentials.
	AccessKey string
	SecretKey string

	bin     string
	root    string // gateway root: one subdirectory per bucket
	sidecar string // metadata directory when xattrs are unavailable, else ""
	logPath string
	addr    string // 127.0.0.1:PORT

	mu       sync.Mutex
	proc     *exec.Cmd
	exited   chan struct{} // closed when proc has been waited for
	nbuckets int
	client   *awss3.Client
}

// Start runs versitygw on a free loopback port and returns once it answers.
// tb.Cleanup kills it. Without a versitygw binary the test is skipped,
// or fails when $CI is "true".
func Start(tb testing.TB) *Server {
	tb.Helper()
	bin := findBinary(tb)
	dir := tb.TempDir()
	s := &Server{
		Region:    "us-east-1",
		AccessKey: "cairntestaccess",
		SecretKey: "cairntestsecret0123456789",
		bin:       bin,
		root:      filepath.Join(dir, "root"),
		logPath:   filepath.Join(dir, "versitygw.log"),
	}
	if err := os.Mkdir(s.root, 0o755); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		s.stop()
		if tb.Failed() {
			tb.Logf("versitygw log (%s):\n%s", s.logPath, s.logTail())
		}
	})

	var lastErr error
	for range maxLaunches {
		addr, err := freePort()
		if err != nil {
			tb.Fatalf("s3test: pick a loopback port: %v", err)
		}
		s.addr = addr
		s.Endpoint = "http://" + addr
		// xattrs first (versitygw's default metadata store); a filesystem
		// without user xattrs makes versitygw exit at once, and a sidecar
		// directory works everywhere. Not --nometa: without stored ETags
		// conditional writes cannot work.
		for _, sidecar := range []string{"", filepath.Join(dir, "meta")} {
			s.sidecar = sidecar
			if sidecar != "" {
				if err := os.MkdirAll(sidecar, 0o755); err != nil {
					tb.Fatal(err)
				}
			}
			if lastErr = s.launch(); lastErr == nil {
				return s
			}
		}
	}
	tb.Fatalf("s3test: start versitygw: %v\nlog:\n%s", lastErr, s.logTail())
	return nil
}

// Stop kills the server (SIGKILL, as in a crash) and waits for it to exit.
// Requests fail until Restart.
func (s *Server) Stop(tb testing.TB) {
	tb.Helper()
	s.stop()
}

// Restart starts the server again, stopping it first if it runs, on the
// same port and directory: buckets and objects are still there.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	s.stop()
	if err := s.launch(); err != nil {
		tb.Fatalf("s3test: restart versitygw on %s: %v\nlog:\n%s", s.addr, err, s.logTail())
	}
}

// Dir is the gateway's root directory: bucket B's object K is the file
// Dir()/B/K. For tests that damage objects behind the server's back.
func (s *Server) Dir() string { return s.root }

// Args returns the versitygw command line in use (without the binary and
// the credentials, which go in the environment).
func (s *Server) Args() []string {
	args := []string{"--port", s.addr, "--region", s.Region, "--health", healthPath, "--quiet", "posix"}
	if s.sidecar != "" {
		args = append(args, "--sidecar", s.sidecar)
	}
	return append(args, s.root)
}

// NewBucket creates a bucket with a fresh name and returns the name.
func (s *Server) NewBucket(tb testing.TB) string {
	tb.Helper()
	s.mu.Lock()
	s.nbuckets++
	name := fmt.Sprintf("cairn-test-%04d", s.nbuckets)
	if s.client == nil {
		s.client = awss3.New(awss3.Options{
			Region:       s.Region,
			BaseEndpoint: aws.String(s.Endpoint),
			UsePathStyle: true,
			Credentials:  credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
		})
	}
	client := s.client
	s.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := client.CreateBucket(ctx, &awss3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		tb.Fatalf("s3test: create bucket %s: %v", name, err)
	}
	return name
}

// Config returns the s3.Config that reaches bucket and prefix on this
// server with the root credentials.
func (s *Server) Config(bucket, prefix string) s3.Config {
	return s3.Config{
		Bucket:          bucket,
		Prefix:          prefix,
		Endpoint:        s.Endpoint,
		Region:          s.Region,
		PathStyle:       true,
		AccessKeyID:     s.AccessKey,
		SecretAccessKey: s.SecretKey,
	}
}

// Backend opens bucket and prefix on this server; tb.Cleanup closes it.
func (s *Server) Backend(tb testing.TB, bucket, prefix string) *s3.Backend {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := s3.Open(ctx, s.Config(bucket, prefix))
	if err != nil {
		tb.Fatalf("s3test: open s3://%s/%s: %v", bucket, prefix, err)
	}
	tb.Cleanup(func() { b.Close() })
	return b
}

// launch starts the process and waits until it answers its health check.
func (s *Server) launch() error {
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close() // the child has its own copy
	fmt.Fprintf(logf, "--- %s %s\n", s.bin, strings.Join(s.Args(), " "))

	cmd := exec.Command(s.bin, s.Args()...)
	cmd.Env = append(cleanEnv(),
		"ROOT_ACCESS_KEY_ID="+s.AccessKey,
		"ROOT_SECRET_ACCESS_KEY="+s.SecretKey,
	)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	s.mu.Lock()
	s.proc, s.exited = cmd, exited
	s.mu.Unlock()

	if err := waitReady(s.Endpoint+healthPath, exited); err != nil {
		s.stop()
		return err
	}
	return nil
}

// stop kills the process, if any, and waits for it.
func (s *Server) stop() {
	s.mu.Lock()
	cmd, exited := s.proc, s.exited
	s.proc, s.exited = nil, nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-exited
}

func waitReady(url string, exited <-chan struct{}) error {
	hc := &http.Client{Timeout: 500 * time.Millisecond}
	deadline := time.Now().Add(readyTimeout)
	for {
		select {
		case <-exited:
			return errors.New("versitygw exited before it was ready")
		default:
		}
		resp, err := hc.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("versitygw not ready after %v (last: %v)", readyTimeout, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// freePort returns a loopback address with a port that was free a moment
// ago.
func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// cleanEnv is the test's environment without versitygw's own settings
// (VGW_*, ROOT_*), which would change the server under test.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "VGW_") || strings.HasPrefix(kv, "ROOT_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

func (s *Server) logTail() string {
	data, err := os.ReadFile(s.logPath)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	const max = 4000
	if len(data) > max {
		data = data[len(data)-max:]
	}
	return string(data)
}

// findBinary locates versitygw, or skips the test (fails it in CI).
func findBinary(tb testing.TB) string {
	tb.Helper()
	if p := os.Getenv(EnvBinary); p != "" {
		if _, err := os.Stat(p); err != nil {
			tb.Fatalf("s3test: $%s=%s: %v", EnvBinary, p, err)
		}
		return p
	}
	if root, ok := repoRoot(); ok {
		p := filepath.Join(root, ".bin", "versitygw")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p
	}
	const msg = "versitygw not found in $" + EnvBinary + ", <repo>/.bin or $PATH; run `make test`, which installs the pinned version into .bin/"
	if os.Getenv("CI") == "true" {
		tb.Fatal("s3test: " + msg + " (CI=true: a skipped S3 test is a failure)")
	}
	tb.Skip("s3test: " + msg)
	return ""
}

// repoRoot walks up from the working directory to the directory holding
// go.mod.
func repoRoot() (string, bool) {
	dir, err := os.Getwd()
	if err != nil {
		return "", false
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}
