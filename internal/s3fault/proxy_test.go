package s3fault_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/cairnfs/cairn/chunkstore/backend"
	"github.com/cairnfs/cairn/chunkstore/backend/backendtest"
	"github.com/cairnfs/cairn/internal/s3fault"
)

func TestNew_Loopback(t *testing.T) {
	p, err := s3fault.New("http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	u, err := url.Parse(p.URL())
	if err != nil {
		t.Fatal(err)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	if u.Scheme != "http" || host != "127.0.0.1" || port == "0" {
		t.Errorf("URL() = %q, want http://127.0.0.1:PORT", p.URL())
	}
	if err := p.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if c, err := net.Dial("tcp", u.Host); err == nil {
		c.Close()
		t.Errorf("the proxy still accepts connections after Close")
	}
}

func TestNew_BadUpstream(t *testing.T) {
	for _, up := range []string{"", "127.0.0.1:7070", "ftp://h", "http://", "http://h/base", "http://h?x=1", "http://u:p@h"} {
		if p, err := s3fault.New(up); err == nil {
			p.Close()
			t.Errorf("New(%q) succeeded, want an error", up)
		}
	}
}

// TestProxy_Transparent runs cairn's backend conformance suite through the
// proxy: with no fault injected, signatures verify and every operation
// (conditional puts, ranges, listings, large bodies) behaves as without it.
func TestProxy_Transparent(t *testing.T) {
	e := newEnv(t)
	n := 0
	backendtest.Run(t, func(t *testing.T) backend.Backend {
		n++
		return e.backend(t, fmt.Sprintf("conf/%d", n))
	})
	st := e.proxy.Stats()
	if st.Total() == 0 || st.Forwarded != st.Total() || len(st.Injected) != 0 || st.Refused != 0 {
		t.Errorf("stats after a clean run: %v; want every request forwarded and nothing injected", st)
	}
	for _, m := range []string{"GET", "PUT", "HEAD", "DELETE"} {
		if st.Requests[m] == 0 {
			t.Errorf("no %s request seen: %v", m, st)
		}
	}
}

// TestProxy_SignedPaths checks that SigV4 signatures survive the proxy for
// keys whose paths the SDK escapes, for the SDK's own default upload
// (checksums, 100-continue above 2 MiB), and that the SDK's error answers
// come through.
func TestProxy_SignedPaths(t *testing.T) {
	e := newEnv(t)
	c := e.client(t, e.proxy.URL(), true)
	ctx := context.Background()
	keys := []string{
		"plain",
		"dir/sub/file.txt",
		"a b+c=d&e~f%g,h;i:j@k$l!m'n(o)p*q",
		"ünïcødé/ファイル",
		"trailing-dot.",
		"packs/ab/ab12",
	}
	for i, key := range keys {
		data := randBytes(uint64(i), 1000+i)
		if i == len(keys)-1 {
			data = randBytes(99, 3<<20+17) // Expect: 100-continue
		}
		if _, err := c.PutObject(ctx, &awss3.PutObjectInput{
			Bucket: aws.String(e.bucket), Key: aws.String(key), Body: bytes.NewReader(data),
		}); err != nil {
			t.Fatalf("PutObject(%q) through the proxy: %v", key, err)
		}
		got, err := get(c, e.bucket, key)
		if err != nil {
			t.Fatalf("GetObject(%q) through the proxy: %v", key, err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("GetObject(%q): %d bytes differ from the %d put", key, len(got), len(data))
		}
		head, err := c.HeadObject(ctx, &awss3.HeadObjectInput{Bucket: aws.String(e.bucket), Key: aws.String(key)})
		if err != nil {
			t.Fatalf("HeadObject(%q): %v", key, err)
		}
		if got, want := aws.ToInt64(head.ContentLength), int64(len(data)); got != want {
			t.Errorf("HeadObject(%q).ContentLength = %d, want %d", key, got, want)
		}
	}
	list, err := c.ListObjectsV2(ctx, &awss3.ListObjectsV2Input{Bucket: aws.String(e.bucket), Prefix: aws.String("dir/")})
	if err != nil {
		t.Fatalf("ListObjectsV2: %v", err)
	}
	if len(list.Contents) != 1 || aws.ToString(list.Contents[0].Key) != "dir/sub/file.txt" {
		t.Errorf("ListObjectsV2(prefix dir/) = %d objects, want dir/sub/file.txt", len(list.Contents))
	}

	// The server's own refusals pass through unchanged.
	_, err = c.PutObject(ctx, &awss3.PutObjectInput{
		Bucket: aws.String(e.bucket), Key: aws.String("plain"), Body: strings.NewReader("x"), IfNoneMatch: aws.String("*"),
	})
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != "PreconditionFailed" {
		t.Errorf("PutObject(If-None-Match: *) on an existing key: %v, want PreconditionFailed", err)
	}
	_, err = get(c, e.bucket, "missing")
	if !errors.As(err, &ae) || ae.ErrorCode() != "NoSuchKey" {
		t.Errorf("GetObject(missing): %v, want NoSuchKey", err)
	}

	// A wrong secret is still refused: the proxy forwards signatures, it
	// does not make them valid.
	bad := e.client(t, e.proxy.URL(), true, func(o *awss3.Options) {
		o.Credentials = aws.NewCredentialsCache(staticCreds{e.srv.AccessKey, "wrong-secret"})
	})
	if _, err := get(bad, e.bucket, "plain"); !errors.As(err, &ae) || ae.ErrorCode() != "SignatureDoesNotMatch" {
		t.Errorf("GetObject with a wrong secret: %v, want SignatureDoesNotMatch", err)
	}
}

type staticCreds struct{ id, secret string }

func (s staticCreds) Retrieve(context.Context) (aws.Credentials, error) {
	return aws.Credentials{AccessKeyID: s.id, SecretAccessKey: s.secret}, nil
}

// TestProxy_Close checks that Close ends requests held in a delay, rather
// than waiting for them, and that the client sees a failure.
func TestProxy_Close(t *testing.T) {
	e := newEnv(t)
	e.put(t, "k", []byte("data"))
	p, err := s3fault.New(e.srv.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.Inject(s3fault.Fault{Kind: s3fault.Latency, Delay: 1 << 40})
	c := e.client(t, p.URL(), false, func(o *awss3.Options) { o.RetryMaxAttempts = 1 })
	done := make(chan error, 1)
	go func() {
		_, err := get(c, e.bucket, "k")
		done <- err
	}()
	waitFor(t, "the GET to reach the proxy", func() bool { return p.Stats().Requests["GET"] == 1 })
	if err := p.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := <-done; err == nil {
		t.Errorf("GetObject held in a delay succeeded after Close, want an error")
	}
}
