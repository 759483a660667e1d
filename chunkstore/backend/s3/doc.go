// Package s3 implements the cairn object-storage contract (package backend)
// on an S3 bucket, through aws-sdk-go-v2. It works with AWS S3 and with
// S3-compatible servers (versitygw, MinIO, Ceph RGW...) given an endpoint.
//
// A store URL names the bucket, the prefix and how to reach them:
//
//	s3://BUCKET/PREFIX?endpoint=http://127.0.0.1:7070&region=us-east-1&path_style=true
//
// ParseURL turns it into a Config; Open checks the bucket and returns a
// *Backend. Object key K is stored as PREFIX/K. Credentials never appear in
// the URL: they come from Config or the SDK's standard chain (environment,
// shared config and credentials files, profiles, SSO, roles).
//
// Mapping of the contract:
//   - Get with a byte range sends a Range header; 416 InvalidRange is
//     backend.ErrRange, except for offset 0 of an empty object, which reads
//     as empty.
//   - Put sends the body seekable and with its length. Conditions become
//     If-None-Match: * and If-Match: "etag" (S3 conditional writes, which
//     refs rely on for compare-and-swap); 412 PreconditionFailed, 409
//     ConditionalRequestConflict, and 404 for If-Match on a missing object,
//     are backend.ErrConflict. Conditional puts are never retried by the
//     client (see Backend.Put).
//   - ETags are reported without their quotes.
//   - List uses ListObjectsV2 and reports keys relative to the prefix.
//
// All SDK, HTTP and network errors become this package's errors in one
// function, translate (errors.go), which classifies typed errors
// (smithy.APIError codes, HTTP status codes, net errors) and never error
// strings. The result wraps a backend sentinel and the original error.
//
// Retries use the SDK's standard retryer with Config.MaxAttempts attempts
// and capped backoff; connect and response-header timeouts keep a dead
// endpoint from hanging a caller for minutes. The SDK's default CRC
// checksums on uploads and downloads are turned off (only sent where an
// operation requires them) because S3-compatible servers vary in their
// support and cairn verifies every blob against its hash anyway.
//
// Package s3test starts a real S3 server (versitygw) on loopback for tests.
package s3
