// Package s3fault is a fault-injecting HTTP reverse proxy for tests: it sits
// on a loopback port between an S3 client and a real S3 server (versitygw in
// cairn's tests) and, on request, makes the network between them bad, so
// tests can prove that cairn survives slow answers, 5xx and throttling,
// resets, cut and corrupted bodies, lost responses and a dead S3.
//
//	srv := s3test.Start(t)                  // versitygw on loopback
//	p := s3fault.Start(t, srv.Endpoint)     // closed by t.Cleanup
//	cfg := srv.Config(srv.NewBucket(t), "") // then point the client at the proxy
//	cfg.Endpoint = p.URL()
//	b, err := s3.Open(ctx, cfg)
//	...
//	// The next two GETs of packs get a reset: the SDK retries, the read
//	// still succeeds.
//	p.Inject(s3fault.Fault{Kind: s3fault.Reset, Count: 2,
//		Match: s3fault.Match{Method: "GET", KeyContains: "packs/"}})
//	...
//	p.SetDown(true) // every connection reset at once: S3 is gone
//	...
//	p.Clear()       // no faults, up again
//	if st := p.Stats(); st.Injected[s3fault.Reset] != 2 { ... }
//
// # Forwarding
//
// With no fault, the proxy is transparent: it forwards the method, the path
// and query exactly as sent (byte for byte, escaping included), the headers
// and the Host header the client used, and streams bodies both ways. SigV4
// signs the Host header and the escaped path, so both must pass unchanged:
// a proxy that rewrites Host to the upstream's address (as
// httputil.ReverseProxy's SetURL does) gets SignatureDoesNotMatch from
// versitygw. Only hop-by-hop headers (Connection, Transfer-Encoding...),
// which no signature covers, are dropped; the proxy adds none of its own
// (no Accept-Encoding, User-Agent, Content-Type or Date). Clients must use
// path-style addressing (the bucket as the first path segment) and plain
// HTTP to the proxy; the upstream may be http or https.
//
// # Faults
//
// A Fault has a Kind, a Match (method, bucket, key prefix or substring; a
// listing's key is its prefix parameter), and a Count (the next N matching
// requests) or a Probability drawn from the fault's own seeded generator,
// or both. Faults are tried in the order injected; a request meets at most
// one. They may be injected and cleared at any time from any goroutine.
//
// Error and Reset act before forwarding: the upstream never sees the
// request. DropResponse forwards and then resets: the upstream acted, the
// client cannot know (the lost answer to a conditional put). ResetBody,
// Truncate and Corrupt forward and then damage the response body; on a
// response without a body (a PUT's, a HEAD's) they leave nothing to damage.
// Latency delays the request and/or throttles the response body. Resets
// close the socket with SO_LINGER 0, so the kernel sends RST and the client
// reads ECONNRESET (or, if it was still writing, EPIPE or net.ErrClosed).
//
// # What the AWS SDK does with them (aws-sdk-go-v2, standard retryer)
//
//   - It makes 3 attempts per operation by default (retry.DefaultMaxAttempts),
//     with jittered exponential backoff capped at 20s (cairn's backend: 2s),
//     so Count 2 of a retried fault still succeeds and Count 0 fails with a
//     *retry.MaxAttemptsError.
//   - It retries HTTP 500, 502, 503 and 504, the throttling codes (SlowDown,
//     Throttling, RequestLimitExceeded...), RequestTimeout, and connection
//     errors: refused, reset, "use of closed network connection", timeouts.
//   - It does not retry other 4xx (a 404 is an answer), a body read that
//     fails after GetObject returned (truncation, reset mid-body, checksum
//     mismatch: the caller sees them), nor a response it failed to decode
//     (a truncated ListObjectsV2 answer: unexpected EOF, one attempt).
//   - Retries draw on a per-client token bucket (500 tokens, 5 per retry, 10
//     per timeout retry; 1 back per first-try success): a client that meets
//     hundreds of faults stops retrying with a QuotaExceededError.
//   - With LoadDefaultConfig's WhenSupported checksum settings, GetObject
//     asks for the stored checksum and fails at the end of a Corrupt body;
//     cairn's backend asks only when required and gets the wrong bytes, which
//     its content hashes must catch. awss3.New with zero Options leaves the
//     setting unset, which validates nothing.
//
// net/http may replay an idempotent request by itself when a reused
// connection fails before any answer arrives, so with keep-alive the proxy
// can see more requests than the SDK counts attempts. Tests that count
// attempts exactly give their client DisableKeepAlives.
package s3fault
