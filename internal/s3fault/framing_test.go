package s3fault_test

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/cairnfs/cairn/internal/s3fault"
)

// plainClient is a bare net/http client, one connection per request.
func plainClient(t *testing.T) *http.Client {
	tr := &http.Transport{DisableKeepAlives: true, DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// TestProxy_ErrorBody checks the proxy's own answers byte by byte: an
// Error fault's S3 XML body (no upstream needed: it answers before
// forwarding), and a 502 when the upstream cannot be reached.
func TestProxy_ErrorBody(t *testing.T) {
	p := s3fault.Start(t, "http://127.0.0.1:1") // nothing listens on port 1
	c := plainClient(t)

	p.Inject(s3fault.Fault{Kind: s3fault.Error, Status: http.StatusServiceUnavailable, Count: 1})
	resp, err := c.Get(p.URL() + "/bucket/packs/x")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	var e struct {
		Code, Message, Resource, RequestId string
	}
	if err := xml.Unmarshal(body, &e); err != nil {
		t.Fatalf("error body %q: %v", body, err)
	}
	if resp.StatusCode != 503 || e.Code != "SlowDown" || e.Resource != "/bucket/packs/x" || e.RequestId == "" ||
		resp.Header.Get("X-Amz-Request-Id") != e.RequestId || resp.Header.Get("Content-Type") != "application/xml" {
		t.Errorf("injected 503: status %d, headers %v, body %q", resp.StatusCode, resp.Header, body)
	}

	resp, err = c.Get(p.URL() + "/bucket/k")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("with the upstream unreachable: status %d, want 502", resp.StatusCode)
	}
	if st := p.Stats(); st.Requests["GET"] != 2 || st.Forwarded != 0 || st.Injected[s3fault.Error] != 1 {
		t.Errorf("stats: %v", st)
	}
}

// TestProxy_ChunkedBody covers responses without a Content-Length (AWS
// sends some listings chunked; versitygw never does): they pass through,
// and Truncate and ResetBody cut them short in chunked framing. The
// upstream is a plain HTTP server, not an S3 stand-in: only framing is
// under test.
func TestProxy_ChunkedBody(t *testing.T) {
	data := randBytes(9, 100_000)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for b := data; len(b) > 0; b = b[min(len(b), 7000):] {
			w.Write(b[:min(len(b), 7000)])
			w.(http.Flusher).Flush()
		}
	}))
	defer up.Close()
	p := s3fault.Start(t, up.URL)
	c := plainClient(t)
	fetch := func() (*http.Response, []byte, error) {
		resp, err := c.Get(p.URL() + "/b/k")
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp, b, err
	}

	resp, got, err := fetch()
	if err != nil || !bytes.Equal(got, data) || resp.ContentLength != -1 {
		t.Fatalf("chunked body through the proxy: err %v, equal %v, length %d", err, bytes.Equal(got, data), resp.ContentLength)
	}

	p.Inject(s3fault.Fault{Kind: s3fault.Truncate, After: 20_000, Count: 1})
	_, got, err = fetch()
	if !errors.Is(err, io.ErrUnexpectedEOF) || !bytes.Equal(got, data[:20_000]) {
		t.Errorf("truncated chunked body: %d bytes, err %v; want the first 20000 and io.ErrUnexpectedEOF", len(got), err)
	}

	p.Inject(s3fault.Fault{Kind: s3fault.ResetBody, After: 20_000, Count: 1})
	if _, got, err = fetch(); !isConnReset(err) || len(got) > 20_000 {
		t.Errorf("reset chunked body: %d bytes, err %v; want a reset", len(got), err)
	}

	p.Inject(s3fault.Fault{Kind: s3fault.Corrupt, After: 50_000, Count: 1})
	_, got, err = fetch()
	if err != nil || len(got) != len(data) || got[50_000] != ^data[50_000] || !bytes.Equal(got[:50_000], data[:50_000]) || !bytes.Equal(got[50_001:], data[50_001:]) {
		t.Errorf("corrupted chunked body: err %v, %d bytes; want byte 50000 inverted and nothing else", err, len(got))
	}
}
