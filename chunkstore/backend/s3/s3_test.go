package s3_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/cairnfs/cairn/chunkstore/backend"
	"github.com/cairnfs/cairn/chunkstore/backend/backendtest"
	"github.com/cairnfs/cairn/chunkstore/backend/s3"
	"github.com/cairnfs/cairn/chunkstore/backend/s3/s3test"
)

func TestBackend_Conformance(t *testing.T) {
	srv := s3test.Start(t)
	t.Run("BucketRoot", func(t *testing.T) {
		backendtest.Run(t, func(t *testing.T) backend.Backend {
			return srv.Backend(t, srv.NewBucket(t), "")
		})
	})
	t.Run("UnderPrefix", func(t *testing.T) {
		// One bucket, a fresh nested prefix per backend: the prefixes
		// must isolate the backends from each other.
		bucket := srv.NewBucket(t)
		n := 0
		backendtest.Run(t, func(t *testing.T) backend.Backend {
			n++
			return srv.Backend(t, bucket, fmt.Sprintf("tenant/ws%d", n))
		})
	})
}

func TestBackend_PrefixIsolation(t *testing.T) {
	srv := s3test.Start(t)
	bucket := srv.NewBucket(t)
	ctx := context.Background()
	a := srv.Backend(t, bucket, "a")
	ab := srv.Backend(t, bucket, "ab")
	root := srv.Backend(t, bucket, "")
	if _, err := a.Put(ctx, "refs/main", strings.NewReader("in a"), backend.Condition{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ab.Put(ctx, "refs/main", strings.NewReader("in ab"), backend.Condition{}); err != nil {
		t.Fatal(err)
	}
	var keys []string
	if err := a.List(ctx, "", func(i backend.Info) error { keys = append(keys, i.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(keys, " "), "refs/main"; got != want {
		t.Errorf("List under prefix a = %q, want %q (prefix ab must not leak in)", got, want)
	}
	data, err := backend.ReadAll(ctx, root, "a/refs/main")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(data), "in a"; got != want {
		t.Errorf("object a/refs/main seen from the bucket root = %q, want %q", got, want)
	}
	if got, want := a.Properties(), (backend.Properties{Location: "s3://" + bucket + "/a"}); got != want {
		t.Errorf("Properties() = %+v, want %+v", got, want)
	}
}

// TestBackend_EdgeRanges covers what the shared suite leaves out: ranges on
// an empty object (S3 answers any Range on one with 416) and zero-length
// reads, which HTTP cannot express.
func TestBackend_EdgeRanges(t *testing.T) {
	srv := s3test.Start(t)
	b := srv.Backend(t, srv.NewBucket(t), "")
	ctx := context.Background()
	for key, body := range map[string]string{"empty": "", "ten": "0123456789"} {
		if _, err := b.Put(ctx, key, strings.NewReader(body), backend.Condition{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		key     string
		off, n  int64
		want    string
		wantErr error
	}{
		{key: "empty", off: 0, n: 10, want: ""},
		{key: "empty", off: 0, n: 0, want: ""},
		{key: "empty", off: 0, n: -1, want: ""},
		{key: "empty", off: 1, n: -1, wantErr: backend.ErrRange},
		{key: "empty", off: 1, n: 0, wantErr: backend.ErrRange},
		{key: "ten", off: 5, n: 0, want: ""},
		{key: "ten", off: 10, n: 0, wantErr: backend.ErrRange},
		{key: "ten", off: 9, n: 1 << 62, want: "9"},
		{key: "ten", off: 0, n: -1, want: "0123456789"},
		{key: "ten", off: -1, n: 1, wantErr: backend.ErrRange},
		{key: "missing", off: 0, n: 0, wantErr: backend.ErrNotFound},
		{key: "missing", off: 3, n: 2, wantErr: backend.ErrNotFound},
	} {
		name := fmt.Sprintf("%s/%d/%d", tc.key, tc.off, tc.n)
		rc, err := b.Get(ctx, tc.key, tc.off, tc.n)
		if tc.wantErr != nil {
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("Get(%s): err = %v, want %v", name, err, tc.wantErr)
			}
			if err == nil {
				rc.Close()
			}
			continue
		}
		if err != nil {
			t.Errorf("Get(%s): %v", name, err)
			continue
		}
		var buf bytes.Buffer
		_, err = buf.ReadFrom(rc)
		rc.Close()
		if err != nil {
			t.Errorf("Get(%s): read: %v", name, err)
		}
		if got := buf.String(); got != tc.want {
			t.Errorf("Get(%s) = %q, want %q", name, got, tc.want)
		}
	}
}

func TestOpen_Unreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "http://" + l.Addr().String()
	l.Close() // nothing listens there any more: connections are refused

	start := time.Now()
	_, err = s3.Open(context.Background(), s3.Config{
		Bucket:          "bucket",
		Endpoint:        endpoint,
		Region:          "us-east-1",
		PathStyle:       true,
		AccessKeyID:     "k",
		SecretAccessKey: "s",
	})
	elapsed := time.Since(start)
	if !errors.Is(err, backend.ErrUnavailable) {
		t.Fatalf("Open(closed port) err = %v, want ErrUnavailable", err)
	}
	want := "cannot reach S3 endpoint " + endpoint + ": connection refused; check --store's endpoint= and that the server is running"
	if got := err.Error(); got != want {
		t.Errorf("message:\n  %s\nwant\n  %s", got, want)
	}
	if elapsed > 10*time.Second {
		t.Errorf("Open took %v to give up on a dead endpoint, want a few seconds", elapsed)
	}
	t.Logf("gave up after %v: %v", elapsed, err)
}

func TestOpen_MissingBucket(t *testing.T) {
	srv := s3test.Start(t)
	_, err := s3.Open(context.Background(), srv.Config("no-such-bucket", "p"))
	if !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("Open(missing bucket) err = %v, want ErrNotFound", err)
	}
	if msg := err.Error(); !strings.Contains(msg, `bucket "no-such-bucket" does not exist`) || !strings.Contains(msg, "create it") {
		t.Errorf("message %q should name the bucket and say to create it", msg)
	}
	t.Log(err)
}

func TestOpen_WrongCredentials(t *testing.T) {
	srv := s3test.Start(t)
	bucket := srv.NewBucket(t)
	for _, tc := range []struct {
		name           string
		access, secret string
	}{
		{"WrongSecret", srv.AccessKey, srv.SecretKey + "x"},
		{"UnknownAccessKey", "nobody", srv.SecretKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := srv.Config(bucket, "")
			cfg.AccessKeyID, cfg.SecretAccessKey = tc.access, tc.secret
			_, err := s3.Open(context.Background(), cfg)
			if !errors.Is(err, backend.ErrPermission) {
				t.Fatalf("Open err = %v, want ErrPermission", err)
			}
			if msg := err.Error(); !strings.Contains(msg, "refused access") || !strings.Contains(msg, "AWS_ACCESS_KEY_ID") {
				t.Errorf("message %q should say access was refused and how to fix the credentials", msg)
			}
			if strings.Contains(err.Error(), tc.secret) {
				t.Errorf("message leaks the secret: %q", err.Error())
			}
			t.Log(err)
		})
	}
}

func TestOpen_InvalidConfig(t *testing.T) {
	_, err := s3.Open(context.Background(), s3.Config{Bucket: "b", Prefix: "/abs"})
	if err == nil || !strings.Contains(err.Error(), "prefix") {
		t.Fatalf("Open with a bad prefix: err = %v, want a prefix error", err)
	}
}

// TestBackend_ConcurrentIfMatchPair races two compare-and-swap writers on
// the same ETag, many times: exactly one may win each round.
func TestBackend_ConcurrentIfMatchPair(t *testing.T) {
	srv := s3test.Start(t)
	b := srv.Backend(t, srv.NewBucket(t), "cas")
	ctx := context.Background()
	cur, err := b.Put(ctx, "refs/ws", strings.NewReader("gen0"), backend.Condition{})
	if err != nil {
		t.Fatal(err)
	}
	const rounds = 50
	for round := 1; round <= rounds; round++ {
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
			infos [2]backend.Info
			errs  [2]error
		)
		for w := range 2 {
			wg.Go(func() {
				<-start
				body := fmt.Sprintf("gen%d-writer%d", round, w)
				infos[w], errs[w] = b.Put(ctx, "refs/ws", strings.NewReader(body), backend.Condition{IfMatch: cur.ETag})
			})
		}
		close(start)
		wg.Wait()
		winner := -1
		for w, err := range errs {
			switch {
			case err == nil && winner >= 0:
				t.Fatalf("round %d: both writers won the If-Match put on ETag %q", round, cur.ETag)
			case err == nil:
				winner = w
			case !errors.Is(err, backend.ErrConflict):
				t.Fatalf("round %d: writer %d: err = %v, want nil or ErrConflict", round, w, err)
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: neither writer won: %v; %v", round, errs[0], errs[1])
		}
		data, err := backend.ReadAll(ctx, b, "refs/ws")
		if err != nil {
			t.Fatal(err)
		}
		if got, want := string(data), fmt.Sprintf("gen%d-writer%d", round, winner); got != want {
			t.Fatalf("round %d: object = %q, want the winner's %q", round, got, want)
		}
		cur = infos[winner]
	}
}

// TestVersitygw_ConditionalPutAnswers pins down what the server itself
// answers to conditional PutObject requests, through the raw SDK: the
// evidence that versitygw's posix backend implements S3 conditional writes.
func TestVersitygw_ConditionalPutAnswers(t *testing.T) {
	srv := s3test.Start(t)
	bucket := srv.NewBucket(t)
	client := awss3.New(awss3.Options{
		Region:       srv.Region,
		BaseEndpoint: aws.String(srv.Endpoint),
		UsePathStyle: true,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey}, nil
		}),
	})
	ctx := context.Background()
	put := func(key, body string, ifMatch, ifNoneMatch *string) (string, error) {
		out, err := client.PutObject(ctx, &awss3.PutObjectInput{
			Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader([]byte(body)),
			IfMatch: ifMatch, IfNoneMatch: ifNoneMatch,
		})
		if err != nil {
			return "", err
		}
		return aws.ToString(out.ETag), nil
	}
	code := func(err error) string {
		var ae smithy.APIError
		if errors.As(err, &ae) {
			return ae.ErrorCode()
		}
		return fmt.Sprintf("no API error: %v", err)
	}

	etag1, err := put("k", "v1", nil, aws.String("*"))
	if err != nil {
		t.Fatalf("If-None-Match: * on a new key: %v", err)
	}
	if _, err := put("k", "v2", nil, aws.String("*")); code(err) != "PreconditionFailed" {
		t.Errorf("If-None-Match: * on an existing key: %v, want PreconditionFailed", err)
	}
	etag2, err := put("k", "v2", aws.String(etag1), nil)
	if err != nil {
		t.Fatalf("If-Match with the current ETag %s: %v", etag1, err)
	}
	if _, err := put("k", "v3", aws.String(etag1), nil); code(err) != "PreconditionFailed" {
		t.Errorf("If-Match with a stale ETag: %v, want PreconditionFailed", err)
	}
	if _, err := put("k", "v3", aws.String(strings.Trim(etag2, `"`)), nil); err != nil {
		t.Errorf("If-Match with the current ETag unquoted: %v", err)
	}
	if _, err := put("missing", "v", aws.String(etag1), nil); code(err) != "NoSuchKey" {
		t.Errorf("If-Match on a missing key: %v, want NoSuchKey (as AWS answers)", err)
	}
	if _, err := put("k", "v", aws.String(`"0123"`), nil); code(err) != "PreconditionFailed" {
		t.Errorf("If-Match with an unrelated ETag: %v, want PreconditionFailed", err)
	}
}

// TestBackend_ServerDown checks that a dead server gives ErrUnavailable
// quickly, and that the backend recovers when the server is back.
func TestBackend_ServerDown(t *testing.T) {
	srv := s3test.Start(t)
	b := srv.Backend(t, srv.NewBucket(t), "p")
	ctx := context.Background()
	if _, err := b.Put(ctx, "k", strings.NewReader("v"), backend.Condition{}); err != nil {
		t.Fatal(err)
	}
	srv.Stop(t)
	start := time.Now()
	_, err := b.Stat(ctx, "k")
	if !errors.Is(err, backend.ErrUnavailable) {
		t.Fatalf("Stat with the server down: err = %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Stat took %v to fail", d)
	}
	_, err = b.Put(ctx, "k", strings.NewReader("v2"), backend.Condition{IfNoneMatch: true})
	if !errors.Is(err, backend.ErrUnavailable) {
		t.Fatalf("conditional Put with the server down: err = %v, want ErrUnavailable", err)
	}
	srv.Restart(t)
	data, err := backend.ReadAll(ctx, b, "k")
	if err != nil {
		t.Fatalf("Get after restart: %v", err)
	}
	if string(data) != "v" {
		t.Errorf("after restart the object is %q, want %q", data, "v")
	}
}

// With no credentials anywhere, Open says so and what to set, before it
// sends any request (and never probes instance metadata: disabled here, as
// in every test run, because tests may reach loopback only).
func TestOpen_NoCredentials(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "none"))
	t.Setenv("AWS_WEB_IDENTITY_TOKEN_FILE", "")
	t.Setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "")
	t.Setenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "")
	_, err := s3.Open(context.Background(), s3.Config{Bucket: "b", Endpoint: "http://127.0.0.1:1", Region: "us-east-1", PathStyle: true})
	if !errors.Is(err, backend.ErrPermission) || !strings.Contains(err.Error(), "AWS_ACCESS_KEY_ID") {
		t.Fatalf("Open without credentials: err = %v, want ErrPermission naming AWS_ACCESS_KEY_ID", err)
	}
}

// flipReader reads as its data the first time through and with one byte
// flipped after it is rewound: a body that changes between the checksum
// pass and the send, as a bad disk or memory would.
type flipReader struct {
	data   []byte
	off    int64
	passes int
}

func (r *flipReader) Read(p []byte) (int, error) {
	if r.off >= int64(len(r.data)) {
		return 0, io.EOF
	}
	n := copy(p, r.data[r.off:])
	if r.passes > 1 && r.off == 0 && n > 0 {
		p[0] ^= 0xff
	}
	r.off += int64(n)
	return n, nil
}

func (r *flipReader) Seek(off int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
		r.off = off
	case io.SeekEnd:
		r.off = int64(len(r.data)) + off
	default:
		r.off += off
	}
	if r.off == 0 {
		r.passes++
	}
	return r.off, nil
}

// TestBackend_PutChecksum: every upload carries a CRC32C the server checks,
// so a body that changes in flight is refused, never stored.
func TestBackend_PutChecksum(t *testing.T) {
	srv := s3test.Start(t)
	b := srv.Backend(t, srv.NewBucket(t), "p")
	ctx := context.Background()
	if _, err := b.Put(ctx, "packs/00/x", &flipReader{data: []byte("pack bytes")}, backend.Condition{}); err == nil {
		data, _ := backend.ReadAll(ctx, b, "packs/00/x")
		t.Fatalf("Put of a body that changed after its checksum succeeded; stored %q", data)
	}
	if _, err := b.Stat(ctx, "packs/00/x"); !errors.Is(err, backend.ErrNotFound) {
		t.Errorf("Stat after the refused Put: %v, want ErrNotFound", err)
	}
}
