package s3fault

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// hopHeaders belong to one connection and are not forwarded (RFC 9110
// section 7.6.1). No SigV4 signature covers them.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

func removeHopHeaders(h http.Header) {
	for _, f := range h.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

// copyChunk is the unit of body copies.
const copyChunk = 32 << 10

// serve is the proxy's handler: it applies the fault, if any, that hits r,
// and forwards r to the upstream otherwise.
func (p *Proxy) serve(w http.ResponseWriter, r *http.Request) {
	f, ok := p.admit(r)
	if !ok {
		hijackReset(w)
		return
	}
	defer p.handlers.Done()

	if f == nil {
		p.proxy(w, r, nil)
		return
	}
	switch f.Kind {
	case Error:
		writeError(w, r, f.Status, f.Code, "injected by s3fault", p.nextRequestID())
	case Reset:
		hijackReset(w)
	default:
		p.proxy(w, r, f)
	}
}

// proxy forwards r and sends the response back, applying f (nil, or a
// kind that forwards).
func (p *Proxy) proxy(w http.ResponseWriter, r *http.Request, f *Fault) {
	ctx := r.Context()
	if f != nil && f.Kind == Latency && f.Delay > 0 {
		if !sleep(ctx, f.Delay) {
			hijackReset(w) // closing, or the client gave up
			return
		}
	}
	resp, err := p.roundTrip(ctx, r)
	if err != nil {
		if ctx.Err() != nil {
			hijackReset(w)
			return
		}
		writeError(w, r, http.StatusBadGateway, "BadGateway",
			"s3fault: upstream "+p.upstream.String()+": "+err.Error(), p.nextRequestID())
		return
	}
	defer resp.Body.Close()

	kind := Kind(0)
	if f != nil {
		kind = f.Kind
	}
	switch kind {
	case DropResponse:
		hijackReset(w)
	case ResetBody, Truncate:
		sendPartial(w, r, resp, f)
	default:
		copyHeader(w.Header(), resp.Header)
		w.WriteHeader(resp.StatusCode)
		var err error
		switch kind {
		case Corrupt:
			err = copyCorrupt(w, resp.Body, f.After)
		case Latency:
			err = copyThrottled(ctx, w, resp.Body, f.BytesPerSecond)
		default:
			err = copyFlushing(w, resp.Body)
		}
		if err != nil {
			// The upstream or the client broke off, or the proxy
			// is closing: the client must not take what it got
			// for a whole response.
			panic(http.ErrAbortHandler)
		}
	}
}

// roundTrip sends r to the upstream exactly as the client sent it: same
// method, path and query bytes, headers and Host header (which SigV4
// signs), and the body streamed through.
func (p *Proxy) roundTrip(ctx context.Context, in *http.Request) (*http.Response, error) {
	out := in.Clone(ctx)
	out.RequestURI = ""
	out.Close = false
	out.Host = in.Host
	u := *p.upstream
	path, query, hasQuery := strings.Cut(in.RequestURI, "?")
	if strings.HasPrefix(path, "/") && !strings.HasPrefix(path, "//") {
		// Opaque keeps the path's escaping byte for byte: the
		// canonical request of the signature includes it.
		u.Opaque = path
	} else {
		u.Path, u.RawPath = in.URL.Path, in.URL.RawPath
	}
	u.RawQuery, u.ForceQuery = query, hasQuery && query == ""
	out.URL = &u
	removeHopHeaders(out.Header)
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header["User-Agent"] = []string{""} // keep net/http from adding its own
	}
	if in.ContentLength == 0 {
		out.Body = nil
	}
	resp, err := p.transport.RoundTrip(out)
	if err != nil {
		return nil, err
	}
	p.countForwarded()
	return resp, nil
}

// copyHeader copies the upstream's response headers, so that net/http adds
// none of its own (Content-Type sniffing, Date).
func copyHeader(dst, src http.Header) {
	for k, vv := range src {
		dst[k] = append([]string(nil), vv...)
	}
	removeHopHeaders(dst)
	for _, k := range []string{"Content-Type", "Date"} {
		if _, ok := dst[k]; !ok {
			dst[k] = nil
		}
	}
}

// copyFlushing streams src to w, flushing after every read so the client
// sees the bytes as the upstream sends them.
func copyFlushing(w http.ResponseWriter, src io.Reader) error {
	rc := http.NewResponseController(w)
	buf := make([]byte, copyChunk)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
			if ferr := rc.Flush(); ferr != nil {
				return ferr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// copyThrottled streams src to w at no more than bps bytes per second (no
// limit if bps is 0), in chunks of about a fiftieth of a second's worth.
func copyThrottled(ctx context.Context, w http.ResponseWriter, src io.Reader, bps int64) error {
	if bps == 0 {
		return copyFlushing(w, src)
	}
	rc := http.NewResponseController(w)
	buf := make([]byte, min(copyChunk, max(1, bps/50)))
	start := time.Now()
	var sent int64
	for {
		n, err := io.ReadFull(src, buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
			if ferr := rc.Flush(); ferr != nil {
				return ferr
			}
			sent += int64(n)
			due := start.Add(time.Duration(float64(sent) / float64(bps) * float64(time.Second)))
			if !sleep(ctx, time.Until(due)) {
				return ctx.Err()
			}
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// copyCorrupt streams src to w with the byte at offset at inverted, or the
// last byte if src is shorter. It reads one chunk ahead, so that it knows
// which byte is the last.
func copyCorrupt(w http.ResponseWriter, src io.Reader, at int64) error {
	rc := http.NewResponseController(w)
	br := bufio.NewReaderSize(src, copyChunk+1)
	chunk := make([]byte, copyChunk)
	var off int64
	flipped := false
	for {
		b, err := br.Peek(copyChunk + 1)
		if len(b) == 0 {
			if err == io.EOF {
				return nil
			}
			return err
		}
		end := err != nil // b holds all that is left
		n := len(b)
		if !end {
			n-- // hold one byte back: it may be the last
		}
		c := chunk[:n]
		copy(c, b)
		if !flipped && at < off+int64(n) {
			c[at-off] ^= 0xff
			flipped = true
		} else if !flipped && end && err == io.EOF {
			c[n-1] ^= 0xff
			flipped = true
		}
		if _, werr := w.Write(c); werr != nil {
			return werr
		}
		if ferr := rc.Flush(); ferr != nil {
			return ferr
		}
		_, _ = br.Discard(n)
		off += int64(n)
		if end {
			if err == io.EOF {
				return nil
			}
			return err
		}
	}
}

// sendPartial answers with the upstream's status line and headers and the
// first f.After bytes of its body (never the whole of a non-empty body),
// written on the hijacked connection, then resets it (ResetBody) or closes
// it cleanly (Truncate).
func sendPartial(w http.ResponseWriter, r *http.Request, resp *http.Response, f *Fault) {
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	bw := brw.Writer

	h := resp.Header.Clone()
	removeHopHeaders(h)
	h.Set("Connection", "close")
	bodyless := r.Method == http.MethodHead || resp.StatusCode == http.StatusNoContent ||
		resp.StatusCode == http.StatusNotModified
	chunked := !bodyless && resp.ContentLength < 0
	switch {
	case chunked:
		h.Set("Transfer-Encoding", "chunked")
	case !bodyless:
		h.Set("Content-Length", strconv.FormatInt(resp.ContentLength, 10))
	}
	fmt.Fprintf(bw, "HTTP/1.1 %03d %s\r\n", resp.StatusCode, http.StatusText(resp.StatusCode))
	_ = h.Write(bw)
	_, _ = bw.WriteString("\r\n")
	if !bodyless {
		var dst io.Writer = bw
		if chunked {
			dst = &chunkWriter{w: bw}
		}
		_ = sendPrefix(dst, resp.Body, f.After)
	}
	_ = bw.Flush()

	if f.Kind == ResetBody {
		resetConn(conn)
		return
	}
	closeGracefully(r.Context(), conn)
}

// sendPrefix writes the first n bytes of src to dst, but never all of src:
// if src holds n bytes or fewer, its last byte is held back.
func sendPrefix(dst io.Writer, src io.Reader, n int64) error {
	br := bufio.NewReaderSize(src, copyChunk+1)
	var sent int64
	for sent < n {
		want := int(min(n-sent, copyChunk))
		b, err := br.Peek(want + 1)
		k := min(len(b), want)
		if err != nil && len(b) <= want && k > 0 {
			k = len(b) - 1 // src ends here: keep its last byte
		}
		if _, werr := dst.Write(b[:k]); werr != nil {
			return werr
		}
		_, _ = br.Discard(k)
		sent += int64(k)
		if err != nil {
			return err
		}
	}
	return nil
}

// chunkWriter frames writes in HTTP/1.1 chunked encoding, without ever
// writing the last chunk: the body it carries ends short.
type chunkWriter struct{ w io.Writer }

func (c *chunkWriter) Write(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	if _, err := fmt.Fprintf(c.w, "%x\r\n", len(b)); err != nil {
		return 0, err
	}
	if _, err := c.w.Write(b); err != nil {
		return 0, err
	}
	_, err := io.WriteString(c.w, "\r\n")
	return len(b), err
}

// closeGracefully ends c with a FIN and waits (a little) for the client to
// close its side before closing the socket: closing with unread input
// would make the kernel send RST, and the client would see a reset
// instead of an early EOF. It gives up when ctx is done.
func closeGracefully(ctx context.Context, c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
		_ = tc.SetReadDeadline(time.Now().Add(5 * time.Second))
		stop := context.AfterFunc(ctx, func() { _ = tc.SetReadDeadline(time.Now()) })
		_, _ = io.Copy(io.Discard, tc)
		stop()
	}
	_ = c.Close()
}

// hijackReset resets the request's connection without answering.
func hijackReset(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	resetConn(conn)
}

// sleep waits for d or until ctx is done, and reports whether it waited
// the whole time.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
