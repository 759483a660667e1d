package s3fault_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cairnfs/cairn/chunkstore/backend/s3"
	"github.com/cairnfs/cairn/chunkstore/backend/s3/s3test"
	"github.com/cairnfs/cairn/internal/s3fault"
)

// sdkAttempts is aws-sdk-go-v2's default number of attempts per operation
// (retry.DefaultMaxAttempts), which the test clients keep.
const sdkAttempts = retry.DefaultMaxAttempts

// env is a versitygw, a bucket on it and a proxy in front of it.
type env struct {
	srv    *s3test.Server
	proxy  *s3fault.Proxy
	bucket string
	direct *awss3.Client // straight to versitygw, for checks behind the proxy's back
}

// newEnv starts versitygw (skipping without it, failing in CI), creates a
// bucket and puts a proxy in front.
func newEnv(t *testing.T) *env {
	t.Helper()
	srv := s3test.Start(t)
	e := &env{srv: srv, bucket: srv.NewBucket(t), proxy: s3fault.Start(t, srv.Endpoint)}
	e.direct = e.client(t, srv.Endpoint, false)
	return e
}

// client returns an SDK client for endpoint with the defaults that
// config.LoadDefaultConfig gives (three attempts, the standard retry rules,
// checksums sent and validated when supported), but a backoff of at most a
// few milliseconds so retries do not make tests slow. Without
// keepAlive every request goes on a new connection: net/http then never
// replays a request on its own, and the proxy sees exactly the SDK's
// attempts.
func (e *env) client(t *testing.T, endpoint string, keepAlive bool, optFns ...func(*awss3.Options)) *awss3.Client {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	tr.DisableKeepAlives = !keepAlive
	t.Cleanup(tr.CloseIdleConnections)
	opts := awss3.Options{
		Region:       e.srv.Region,
		BaseEndpoint: aws.String(endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(e.srv.AccessKey, e.srv.SecretKey, ""),
		HTTPClient:   &http.Client{Transport: tr},
		// awss3.New leaves these unset, which validates nothing;
		// LoadDefaultConfig sets WhenSupported.
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenSupported,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenSupported,
		Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxBackoff = 5 * time.Millisecond
		}),
	}
	return awss3.New(opts, optFns...)
}

// proxied is a client through the proxy, one connection per request.
func (e *env) proxied(t *testing.T, optFns ...func(*awss3.Options)) *awss3.Client {
	t.Helper()
	return e.client(t, e.proxy.URL(), false, optFns...)
}

// backend opens cairn's S3 backend on the bucket through the proxy, with a
// short backoff.
func (e *env) backend(t *testing.T, prefix string) *s3.Backend {
	t.Helper()
	cfg := e.srv.Config(e.bucket, prefix)
	cfg.Endpoint = e.proxy.URL()
	cfg.MaxBackoff = 5 * time.Millisecond
	b, err := s3.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("open the s3 backend through the proxy: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// put stores data at key, straight on versitygw.
func (e *env) put(t *testing.T, key string, data []byte) {
	t.Helper()
	_, err := e.direct.PutObject(context.Background(), &awss3.PutObjectInput{
		Bucket: aws.String(e.bucket), Key: aws.String(key), Body: bytes.NewReader(data),
	})
	if err != nil {
		t.Fatalf("put %s on versitygw: %v", key, err)
	}
}

// exists reports whether key is on versitygw.
func (e *env) exists(t *testing.T, key string) bool {
	t.Helper()
	_, err := e.direct.HeadObject(context.Background(), &awss3.HeadObjectInput{
		Bucket: aws.String(e.bucket), Key: aws.String(key),
	})
	if err == nil {
		return true
	}
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) && re.HTTPStatusCode() == http.StatusNotFound {
		return false
	}
	t.Fatalf("head %s on versitygw: %v", key, err)
	return false
}

// get reads key through c: the whole body, or the error of the call or of
// the read.
func get(c *awss3.Client, bucket, key string) ([]byte, error) {
	out, err := c.GetObject(context.Background(), &awss3.GetObjectInput{
		Bucket: aws.String(bucket), Key: aws.String(key),
	})
	if err != nil {
		return nil, err
	}
	defer out.Body.Close()
	return io.ReadAll(out.Body)
}

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed+1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// isConnReset reports whether err is a connection reset by the peer. When
// the client was still writing a request body, the reset shows instead as
// a broken pipe, or as net.ErrClosed ("use of closed network connection"):
// net/http's reader saw the RST and closed the connection under the
// writer.
func isConnReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed)
}

// waitFor polls cond until it holds, failing t after a generous deadline:
// for states reached asynchronously, never for timing.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
