package s3fault_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/cairnfs/cairn/chunkstore/backend"
	"github.com/cairnfs/cairn/internal/s3fault"
)

// attempts returns how many attempts the SDK reports it made for a call
// that failed after retries, or 1.
func attempts(err error) int {
	var me *retry.MaxAttemptsError
	if errors.As(err, &me) {
		return me.Attempt
	}
	return 1
}

func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

func httpStatus(err error) int {
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

func TestFault_Error(t *testing.T) {
	e := newEnv(t)
	data := randBytes(1, 5000)
	e.put(t, "packs/a", data)
	c := e.proxied(t)

	t.Run("RetriedUntilCountIsSpent", func(t *testing.T) {
		// SlowDown (503) twice, below the SDK's three attempts: the
		// third attempt gets through.
		before := e.proxy.Stats()
		e.proxy.Inject(s3fault.Fault{Kind: s3fault.Error, Status: http.StatusServiceUnavailable, Count: sdkAttempts - 1})
		got, err := get(c, e.bucket, "packs/a")
		if err != nil {
			t.Fatalf("GetObject with %d injected 503s: %v", sdkAttempts-1, err)
		}
		if !bytes.Equal(got, data) {
			t.Errorf("GetObject returned other bytes after retries")
		}
		st := e.proxy.Stats()
		if got, want := st.Requests["GET"]-before.Requests["GET"], sdkAttempts; got != want {
			t.Errorf("proxy saw %d GETs, want %d (%d refused, then one through)", got, want, sdkAttempts-1)
		}
		if got, want := st.Injected[s3fault.Error]-before.Injected[s3fault.Error], sdkAttempts-1; got != want {
			t.Errorf("injected %d errors, want %d", got, want)
		}
	})

	t.Run("RetriesExhausted", func(t *testing.T) {
		before := e.proxy.Stats()
		e.proxy.Inject(s3fault.Fault{Kind: s3fault.Error})
		defer e.proxy.Clear()
		_, err := get(c, e.bucket, "packs/a")
		if got, want := apiCode(err), "InternalError"; got != want {
			t.Fatalf("GetObject under a lasting 500: %v; want code %s", err, want)
		}
		if got, want := httpStatus(err), 500; got != want {
			t.Errorf("HTTP status %d, want %d", got, want)
		}
		if got, want := attempts(err), sdkAttempts; got != want {
			t.Errorf("the SDK reports %d attempts, want %d", got, want)
		}
		if got, want := e.proxy.Stats().Requests["GET"]-before.Requests["GET"], sdkAttempts; got != want {
			t.Errorf("proxy saw %d GETs, want %d", got, want)
		}
	})

	t.Run("NotRetried", func(t *testing.T) {
		// A 404 is an answer, not trouble: one attempt, and the SDK's
		// typed NoSuchKey although the object exists.
		before := e.proxy.Stats()
		e.proxy.Inject(s3fault.Fault{Kind: s3fault.Error, Status: http.StatusNotFound, Count: 1})
		_, err := get(c, e.bucket, "packs/a")
		var nsk *types.NoSuchKey
		if !errors.As(err, &nsk) {
			t.Fatalf("GetObject under an injected 404: %v, want *types.NoSuchKey", err)
		}
		if got := e.proxy.Stats().Requests["GET"] - before.Requests["GET"]; got != 1 {
			t.Errorf("proxy saw %d GETs, want 1", got)
		}
		// A HEAD answer carries no body, so no code: the SDK makes a
		// NotFound of the status.
		e.proxy.Inject(s3fault.Fault{Kind: s3fault.Error, Status: http.StatusNotFound, Count: 1, Match: s3fault.Match{Method: "HEAD"}})
		_, err = c.HeadObject(context.Background(), &awss3.HeadObjectInput{Bucket: aws.String(e.bucket), Key: aws.String("packs/a")})
		if got := httpStatus(err); got != http.StatusNotFound {
			t.Errorf("HeadObject under an injected 404: %v, want status 404", err)
		}
	})

	t.Run("Backend", func(t *testing.T) {
		// cairn's backend sees a lasting 503 as ErrUnavailable, and the
		// upload never reached the server.
		b := e.backend(t, "")
		e.proxy.Inject(s3fault.Fault{Kind: s3fault.Error, Status: http.StatusServiceUnavailable, Code: "SlowDown", Match: s3fault.Match{Method: "PUT"}})
		defer e.proxy.Clear()
		_, err := b.Put(context.Background(), "packs/b", bytes.NewReader(data), backend.Condition{})
		if !errors.Is(err, backend.ErrUnavailable) || apiCode(err) != "SlowDown" {
			t.Errorf("Put under a lasting SlowDown: %v, want ErrUnavailable with code SlowDown", err)
		}
		if e.exists(t, "packs/b") {
			t.Errorf("packs/b exists: an Error fault must answer before forwarding")
		}
	})
}

func TestFault_Reset(t *testing.T) {
	e := newEnv(t)
	data := randBytes(2, 5000)
	e.put(t, "k", data)
	c := e.proxied(t)

	t.Run("RetriesExhausted", func(t *testing.T) {
		before := e.proxy.Stats()
		e.proxy.Inject(s3fault.Fault{Kind: s3fault.Reset, Match: s3fault.Match{Method: "GET"}})
		defer e.proxy.Clear()
		_, err := get(c, e.bucket, "k")
		if !isConnReset(err) {
			t.Fatalf("GetObject under lasting resets: %v, want ECONNRESET", err)
		}
		if got, want := attempts(err), sdkAttempts; got != want {
			t.Errorf("the SDK reports %d attempts, want %d: it retries resets", got, want)
		}
		st := e.proxy.Stats()
		if got, want := st.Injected[s3fault.Reset]-before.Injected[s3fault.Reset], sdkAttempts; got != want {
			t.Errorf("%d resets injected, want %d", got, want)
		}
		if st.Forwarded != before.Forwarded {
			t.Errorf("%d requests forwarded, want none", st.Forwarded-before.Forwarded)
		}
	})

	t.Run("Recovers", func(t *testing.T) {
		e.proxy.Inject(s3fault.Fault{Kind: s3fault.Reset, Count: sdkAttempts - 1})
		got, err := get(c, e.bucket, "k")
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("GetObject with %d resets: err %v, equal %v", sdkAttempts-1, err, bytes.Equal(got, data))
		}
	})

	t.Run("PutNeverArrives", func(t *testing.T) {
		e.proxy.Inject(s3fault.Fault{Kind: s3fault.Reset, Match: s3fault.Match{Method: "PUT"}})
		defer e.proxy.Clear()
		_, err := c.PutObject(context.Background(), &awss3.PutObjectInput{
			Bucket: aws.String(e.bucket), Key: aws.String("new"), Body: bytes.NewReader(randBytes(3, 3<<20)),
		})
		if !isConnReset(err) {
			t.Fatalf("PutObject under lasting resets: %v, want a reset", err)
		}
		if e.exists(t, "new") {
			t.Errorf("the object exists: Reset must act before forwarding")
		}
	})

	t.Run("ReplayedByNetHTTP", func(t *testing.T) {
		// On a reused keep-alive connection, net/http replays an
		// idempotent request (GET, HEAD) that met a reset before any
		// answer, on a new connection: the SDK never knows. The proxy
		// counts both requests.
		pooled := e.client(t, e.proxy.URL(), true)
		if _, err := get(pooled, e.bucket, "k"); err != nil {
			t.Fatal(err) // leaves a connection in the pool
		}
		before := e.proxy.Stats()
		e.proxy.Inject(s3fault.Fault{Kind: s3fault.Reset, Count: 1})
		out, err := pooled.GetObject(context.Background(), &awss3.GetObjectInput{Bucket: aws.String(e.bucket), Key: aws.String("k")})
		if err != nil {
			t.Fatalf("GetObject after one reset on a pooled connection: %v", err)
		}
		out.Body.Close()
		ar, _ := retry.GetAttemptResults(out.ResultMetadata)
		if got, want := len(ar.Results), 1; got != want {
			t.Errorf("the SDK made %d attempts, want %d", got, want)
		}
		if got, want := e.proxy.Stats().Requests["GET"]-before.Requests["GET"], 2; got != want {
			t.Errorf("proxy saw %d GETs, want %d", got, want)
		}
	})

	t.Run("BackendPooled", func(t *testing.T) {
		// cairn's backend on pooled connections: one reset costs a
		// retry, not the operation.
		b := e.backend(t, "")
		e.proxy.Inject(s3fault.Fault{Kind: s3fault.Reset, Count: 1})
		rc, err := b.Get(context.Background(), "k", 0, -1)
		if err != nil {
			t.Fatalf("backend Get after one reset: %v", err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("backend Get after one reset: err %v, equal %v", err, bytes.Equal(got, data))
		}
	})
}

// TestFault_DropResponse is the lost answer: the write lands, the client
// cannot know. A plain put retries and succeeds (it is idempotent); a
// conditional put is attempted once and reports ErrUnavailable, and the
// caller must read the key to learn the outcome.
func TestFault_DropResponse(t *testing.T) {
	e := newEnv(t)
	b := e.backend(t, "")
	ctx := context.Background()
	put := s3fault.Match{Method: "PUT"}

	before := e.proxy.Stats()
	e.proxy.Inject(s3fault.Fault{Kind: s3fault.DropResponse, Match: put, Count: 1})
	if _, err := b.Put(ctx, "packs/p", strings.NewReader("pack"), backend.Condition{}); err != nil {
		t.Fatalf("plain Put after a dropped response: %v", err)
	}
	if got := e.proxy.Stats().Requests["PUT"] - before.Requests["PUT"]; got != 2 {
		t.Errorf("proxy saw %d PUTs, want 2 (dropped, retried)", got)
	}

	e.proxy.Inject(s3fault.Fault{Kind: s3fault.DropResponse, Match: put, Count: 1})
	_, err := b.Put(ctx, "refs/main", strings.NewReader("ref"), backend.Condition{IfNoneMatch: true})
	if !errors.Is(err, backend.ErrUnavailable) {
		t.Fatalf("conditional Put after a dropped response: %v, want ErrUnavailable", err)
	}
	if !e.exists(t, "refs/main") {
		t.Errorf("refs/main is missing: DropResponse must forward the request")
	}
}

func TestFault_ResetBody(t *testing.T) {
	e := newEnv(t)
	data := randBytes(4, 256<<10)
	e.put(t, "k", data)
	const after = 4096
	e.proxy.Inject(s3fault.Fault{Kind: s3fault.ResetBody, After: after, Match: s3fault.Match{Method: "GET"}})
	got, err := get(e.proxied(t), e.bucket, "k")
	// Usually the headers arrive and the body read fails; if the RST
	// overtakes them, GetObject itself fails (after retries). Either way
	// the client sees a reset and never more than After bytes.
	if !isConnReset(err) {
		t.Fatalf("GetObject with a reset after %d bytes: %d bytes, err %v; want ECONNRESET", after, len(got), err)
	}
	if len(got) > after || !bytes.Equal(got, data[:len(got)]) {
		t.Errorf("read %d bytes before the reset, want at most %d, all correct", len(got), after)
	}
	if e.proxy.Stats().Injected[s3fault.ResetBody] == 0 {
		t.Errorf("no ResetBody counted")
	}
}

func TestFault_Truncate(t *testing.T) {
	e := newEnv(t)
	data := randBytes(5, 256<<10)
	e.put(t, "k", data)
	e.put(t, "tiny", []byte("0123456789"))
	c := e.proxied(t)

	t.Run("GetObject", func(t *testing.T) {
		// The SDK returns once the headers are in: it cannot retry
		// a body read, so the caller gets the error.
		before := e.proxy.Stats()
		e.proxy.Inject(s3fault.Fault{Kind: s3fault.Truncate, After: 1000, Count: 1})
		got, err := get(c, e.bucket, "k")
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("GetObject of a truncated body: err %v, want io.ErrUnexpectedEOF", err)
		}
		if len(got) != 1000 || !bytes.Equal(got, data[:1000]) {
			t.Errorf("read %d bytes of the truncated body, want the first 1000", len(got))
		}
		if got := e.proxy.Stats().Requests["GET"] - before.Requests["GET"]; got != 1 {
			t.Errorf("proxy saw %d GETs, want 1", got)
		}
	})

	t.Run("PastTheEnd", func(t *testing.T) {
		// After beyond the body: all but the last byte.
		e.proxy.Inject(s3fault.Fault{Kind: s3fault.Truncate, After: 1 << 20, Count: 1})
		got, err := get(c, e.bucket, "tiny")
		if !errors.Is(err, io.ErrUnexpectedEOF) || string(got) != "012345678" {
			t.Errorf("GetObject of a 10-byte body truncated after 1 MiB: %q, %v; want 9 bytes and io.ErrUnexpectedEOF", got, err)
		}
	})

	t.Run("Backend", func(t *testing.T) {
		b := e.backend(t, "")
		e.proxy.Inject(s3fault.Fault{Kind: s3fault.Truncate, After: 1000, Count: 1})
		rc, err := b.Get(context.Background(), "k", 0, -1)
		if err != nil {
			t.Fatalf("backend Get: %v", err)
		}
		_, err = io.ReadAll(rc)
		rc.Close()
		if !errors.Is(err, backend.ErrUnavailable) || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("reading a truncated body through the backend: %v, want ErrUnavailable wrapping io.ErrUnexpectedEOF", err)
		}
	})

	t.Run("ListNotRetried", func(t *testing.T) {
		// A response the SDK decodes itself (XML) fails to decode when
		// cut short, and the SDK does not retry that.
		before := e.proxy.Stats()
		e.proxy.Inject(s3fault.Fault{Kind: s3fault.Truncate, After: 50, Count: 1})
		_, err := c.ListObjectsV2(context.Background(), &awss3.ListObjectsV2Input{Bucket: aws.String(e.bucket)})
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("ListObjectsV2 of a truncated answer: %v, want io.ErrUnexpectedEOF", err)
		}
		if got := e.proxy.Stats().Requests["GET"] - before.Requests["GET"]; got != 1 {
			t.Errorf("proxy saw %d GETs, want 1: the SDK does not retry a broken body", got)
		}
	})
}

func TestFault_Corrupt(t *testing.T) {
	e := newEnv(t)
	data := randBytes(6, 100_000)
	// The SDK's default upload: versitygw stores a CRC64NVME checksum.
	sdk := e.client(t, e.proxy.URL(), true)
	if _, err := sdk.PutObject(context.Background(), &awss3.PutObjectInput{
		Bucket: aws.String(e.bucket), Key: aws.String("k"), Body: bytes.NewReader(data),
	}); err != nil {
		t.Fatal(err)
	}

	t.Run("WrongBytesRightLength", func(t *testing.T) {
		// cairn's backend validates no checksum (it hashes blobs
		// itself): it gets the corrupted bytes.
		b := e.backend(t, "")
		for _, at := range []int64{0, 12345, 1 << 30} {
			e.proxy.Inject(s3fault.Fault{Kind: s3fault.Corrupt, After: at, Count: 1})
			rc, err := b.Get(context.Background(), "k", 0, -1)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(rc)
			rc.Close()
			if err != nil {
				t.Fatalf("read a corrupted body: %v", err)
			}
			if len(got) != len(data) {
				t.Fatalf("corrupted body has %d bytes, want %d", len(got), len(data))
			}
			want := min(at, int64(len(data)-1))
			for i := range got {
				if flipped := got[i] != data[i]; flipped != (int64(i) == want) {
					t.Fatalf("Corrupt{After: %d}: byte %d changed %v, want only byte %d changed", at, i, flipped, want)
				}
			}
			if got[want] != ^data[want] {
				t.Errorf("byte %d = %#x, want %#x inverted", want, got[want], data[want])
			}
		}
	})

	t.Run("SDKChecksum", func(t *testing.T) {
		// The SDK with LoadDefaultConfig's settings asks for the
		// stored checksum and checks it at the end of the body.
		e.proxy.Inject(s3fault.Fault{Kind: s3fault.Corrupt, After: 10, Count: 1})
		_, err := get(sdk, e.bucket, "k")
		if err == nil || !strings.Contains(err.Error(), "checksum did not match") {
			t.Errorf("GetObject of a corrupted body with checksum validation: %v, want a checksum mismatch", err)
		}
	})
}

// TestFault_Latency asserts lower bounds only: a loaded machine may be
// slower, never faster.
func TestFault_Latency(t *testing.T) {
	e := newEnv(t)
	data := randBytes(7, 128<<10)
	e.put(t, "k", data)
	c := e.proxied(t)

	t.Run("Delay", func(t *testing.T) {
		const delay = 300 * time.Millisecond
		e.proxy.Inject(s3fault.Fault{Kind: s3fault.Latency, Delay: delay, Count: 1})
		start := time.Now()
		got, err := get(c, e.bucket, "k")
		if elapsed := time.Since(start); elapsed < delay {
			t.Errorf("GetObject took %v with a %v delay", elapsed, delay)
		}
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("GetObject through a delay: err %v, equal %v", err, bytes.Equal(got, data))
		}
	})

	t.Run("SlowBody", func(t *testing.T) {
		const bps = 512 << 10
		e.proxy.Inject(s3fault.Fault{Kind: s3fault.Latency, BytesPerSecond: bps, Count: 1})
		start := time.Now()
		got, err := get(c, e.bucket, "k")
		elapsed := time.Since(start)
		// The last chunk (a fiftieth of a second's worth) may go out
		// without a wait.
		floor := time.Duration(float64(len(data)-bps/50) / bps * float64(time.Second))
		if elapsed < floor {
			t.Errorf("GetObject of %d bytes at %d B/s took %v, want at least %v", len(data), bps, elapsed, floor)
		}
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("GetObject through a slow body: err %v, equal %v", err, bytes.Equal(got, data))
		}
	})
}

func TestProxy_Down(t *testing.T) {
	e := newEnv(t)
	e.put(t, "k", []byte("data"))
	pooled := e.client(t, e.proxy.URL(), true)
	if _, err := get(pooled, e.bucket, "k"); err != nil {
		t.Fatal(err) // leaves a connection in the pool
	}
	fresh := e.proxied(t)
	b := e.backend(t, "")

	e.proxy.SetDown(true)
	before := e.proxy.Stats()
	// A deadline far beyond any retry schedule: failing by it would
	// mean the proxy hung the client instead of refusing it.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for name, c := range map[string]*awss3.Client{"pooled": pooled, "fresh": fresh} {
		_, err := c.GetObject(ctx, &awss3.GetObjectInput{Bucket: aws.String(e.bucket), Key: aws.String("k")})
		if !isConnReset(err) || ctx.Err() != nil {
			t.Errorf("%s client: GetObject while down: %v, want a connection reset", name, err)
		}
		if got := attempts(err); got != sdkAttempts {
			t.Errorf("%s client: %d attempts, want %d", name, got, sdkAttempts)
		}
	}
	if _, err := b.Stat(ctx, "k"); !errors.Is(err, backend.ErrUnavailable) {
		t.Errorf("backend Stat while down: %v, want ErrUnavailable", err)
	}
	st := e.proxy.Stats()
	if got := st.Refused - before.Refused; got < 2*sdkAttempts {
		t.Errorf("%d refusals counted, want at least %d", got, 2*sdkAttempts)
	}
	if st.Forwarded != before.Forwarded {
		t.Errorf("%d requests forwarded while down", st.Forwarded-before.Forwarded)
	}

	for _, up := range []func(){func() { e.proxy.SetDown(false) }, e.proxy.Clear} {
		up()
		if _, err := get(fresh, e.bucket, "k"); err != nil {
			t.Errorf("GetObject once up again: %v", err)
		}
		if _, err := b.Stat(ctx, "k"); err != nil {
			t.Errorf("backend Stat once up again: %v", err)
		}
		e.proxy.SetDown(true)
	}
}
