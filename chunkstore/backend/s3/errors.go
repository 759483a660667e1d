package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"syscall"

	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"

	"github.com/cairnfs/cairn/chunkstore/backend"
)

// op names a backend operation in messages and selects the few rules that
// depend on the operation.
type op string

const (
	opOpen           op = "open"
	opGet            op = "get"
	opPut            op = "put"
	opPutIfMatch     op = "put (if-match)"
	opPutIfNoneMatch op = "put (if-none-match)"
	opStat           op = "stat"
	opList           op = "list"
	opDelete         op = "delete"
)

// translate is the one place where errors from the AWS SDK, the HTTP client
// and the network become this package's errors. The result wraps both the
// backend sentinel that classify picks (if any) and err itself, so callers
// test the sentinel with errors.Is and can still reach the SDK's typed error
// with errors.As. A Delete of a missing key is not an error: translate
// returns nil for it.
//
// When ctx is done and no answer came, the error is the caller's
// cancellation or deadline, not the backend's fault: it wraps ctx.Err() and
// no sentinel.
func translate(ctx context.Context, o op, key string, err error) error {
	if err == nil {
		return nil
	}
	if cerr := ctx.Err(); cerr != nil && httpStatus(err) == 0 {
		if errors.Is(err, cerr) {
			return fmt.Errorf("s3 %s %s: %w", o, key, err)
		}
		return fmt.Errorf("s3 %s %s: %w: %w", o, key, cerr, err)
	}
	if o == opDelete && apiCode(err) == "NoSuchKey" {
		return nil
	}
	sentinel := classify(o, err)
	if sentinel == nil {
		return fmt.Errorf("s3 %s %s: %w", o, key, err)
	}
	return fmt.Errorf("s3 %s %s: %w: %w", o, key, sentinel, err)
}

// classify returns the backend sentinel that err stands for, or nil when
// none fits (a request the server rejected as malformed, say: a bug).
func classify(o op, err error) error {
	conditional := o == opPutIfMatch || o == opPutIfNoneMatch

	// The server answered with an S3 error code: the most precise source.
	switch code := apiCode(err); code {
	case "":
	case "NoSuchKey", "NotFound":
		if o == opPutIfMatch {
			// S3 answers If-Match on a missing object with 404: for
			// the contract that is a lost condition.
			return backend.ErrConflict
		}
		return backend.ErrNotFound
	case "NoSuchBucket":
		return backend.ErrNotFound
	case "PreconditionFailed", "ConditionalRequestConflict":
		return backend.ErrConflict
	case "InvalidRange":
		return backend.ErrRange
	case "AccessDenied", "Forbidden", "InvalidAccessKeyId", "SignatureDoesNotMatch",
		"ExpiredToken", "InvalidToken", "TokenRefreshRequired", "AllAccessDisabled",
		"AccountProblem", "RequestTimeTooSkewed", "Unauthorized",
		// versitygw's answer (with status 404) to an unknown access key.
		"XAdminUserNotFound":
		return backend.ErrPermission
	case "NotImplemented":
		// 501, but no passing trouble: the server lacks a feature
		// (versitygw answers so to If-None-Match with an ETag). Retrying
		// will not help.
		return nil
	case "SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout",
		"Throttling", "ThrottlingException", "RequestLimitExceeded",
		"TooManyRequests", "BandwidthLimitExceeded", "OperationAborted":
		return backend.ErrUnavailable
	}

	// An HTTP status without a code we know (HEAD responses have no body,
	// other servers have other codes).
	if s := httpStatus(err); s != 0 {
		switch {
		case s == http.StatusNotFound:
			if o == opPutIfMatch {
				return backend.ErrConflict
			}
			return backend.ErrNotFound
		case s == http.StatusPreconditionFailed:
			return backend.ErrConflict
		case s == http.StatusConflict && conditional:
			return backend.ErrConflict
		case s == http.StatusRequestedRangeNotSatisfiable:
			return backend.ErrRange
		case s == http.StatusUnauthorized, s == http.StatusForbidden:
			return backend.ErrPermission
		case s == http.StatusRequestTimeout, s == http.StatusTooManyRequests, s >= 500:
			return backend.ErrUnavailable
		}
		// Any other answer is the server's considered refusal of a
		// request it understood to be wrong: no sentinel fits.
		return nil
	}

	// No answer from the server. Credentials that could not be obtained
	// come first: the chain's own network failures (instance metadata not
	// there) mean "no credentials", not "S3 is down".
	var se *v4.SigningError
	if errors.As(err, &se) {
		return backend.ErrPermission
	}
	var qe ratelimit.QuotaExceededError // returned as a value
	if errors.As(err, &qe) {
		return backend.ErrUnavailable
	}
	var ce interface{ ConnectionError() bool }
	if errors.As(err, &ce) && ce.ConnectionError() {
		return backend.ErrUnavailable
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return backend.ErrUnavailable
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return backend.ErrUnavailable
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return backend.ErrUnavailable
	}
	return nil
}

// httpStatus returns the HTTP status of the response err carries, or 0 when
// no response came. (The SDK wraps transport failures in a ResponseError
// too, with status 0.)
func httpStatus(err error) int {
	var re *awshttp.ResponseError
	if errors.As(err, &re) && re.Response != nil && re.Response.Response != nil {
		return re.HTTPStatusCode()
	}
	return 0
}

// apiCode returns the S3 error code of err ("NoSuchKey"), or "".
func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// userError is an error whose message is written for a person (what
// happened, what to do) and which still wraps its sentinel and the
// underlying SDK error for errors.Is and errors.As.
type userError struct {
	msg      string
	sentinel error
	err      error
}

func (e *userError) Error() string   { return e.msg }
func (e *userError) Unwrap() []error { return []error{e.sentinel, e.err} }

// openError explains a failed HeadBucket in Open: endpoint unreachable,
// bucket missing, credentials refused. endpoint is the configured endpoint
// ("" for AWS).
func openError(ctx context.Context, cfg Config, err error) error {
	terr := translate(ctx, opOpen, cfg.Bucket, err)
	if ctx.Err() != nil {
		return terr
	}
	where := cfg.Endpoint
	if where == "" {
		where = "AWS S3 (region " + cfg.Region + ")"
	}
	hint := "check --store's endpoint= and that the server is running"
	if cfg.Endpoint == "" {
		hint = "check the network and --store's region="
	}
	status := httpStatus(err)
	switch {
	case errors.Is(terr, backend.ErrUnavailable) && status == 0:
		return &userError{
			msg:      fmt.Sprintf("cannot reach S3 endpoint %s: %s; %s", requestEndpoint(err, where), netReason(err), hint),
			sentinel: backend.ErrUnavailable,
			err:      err,
		}
	case errors.Is(terr, backend.ErrUnavailable):
		return &userError{
			msg:      fmt.Sprintf("S3 endpoint %s is unavailable (HTTP %d %s); try again later: %v", where, status, codeOr(err, http.StatusText(status)), err),
			sentinel: backend.ErrUnavailable,
			err:      err,
		}
	case errors.Is(terr, backend.ErrNotFound):
		return &userError{
			msg:      fmt.Sprintf("bucket %q does not exist at %s; create it first (for example: aws s3 mb s3://%s%s), or fix the bucket name in --store", cfg.Bucket, where, cfg.Bucket, endpointFlag(cfg)),
			sentinel: backend.ErrNotFound,
			err:      err,
		}
	case errors.Is(terr, backend.ErrPermission):
		var se *v4.SigningError
		if errors.As(err, &se) {
			return &userError{
				msg:      fmt.Sprintf("no usable S3 credentials for bucket %q: %v; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE", cfg.Bucket, se.Err),
				sentinel: backend.ErrPermission,
				err:      err,
			}
		}
		return &userError{
			msg:      fmt.Sprintf("S3 at %s refused access to bucket %q (%s); check the credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE) and the bucket's permissions", where, cfg.Bucket, codeOr(err, "HTTP 403 Forbidden")),
			sentinel: backend.ErrPermission,
			err:      err,
		}
	}
	var re *awshttp.ResponseError
	if status >= 300 && status < 400 && errors.As(err, &re) {
		if r := re.Response.Header.Get("X-Amz-Bucket-Region"); r != "" && r != cfg.Region {
			return fmt.Errorf("bucket %q is in region %s, not %s; add region=%s to --store: %w", cfg.Bucket, r, cfg.Region, r, err)
		}
	}
	return fmt.Errorf("check bucket %q at %s: %w", cfg.Bucket, where, terr)
}

// requestEndpoint returns scheme://host of the request that failed, or
// fallback.
func requestEndpoint(err error, fallback string) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		if u, perr := url.Parse(ue.URL); perr == nil && u.Host != "" {
			return u.Scheme + "://" + u.Host
		}
	}
	return fallback
}

// netReason says in a few words why a connection failed: "connection
// refused", "no such host", "timed out".
func netReason(err error) string {
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return "cannot resolve host " + dnsErr.Name
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timed out"
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Err != nil {
		return oe.Err.Error()
	}
	return err.Error()
}

func codeOr(err error, fallback string) string {
	if c := apiCode(err); c != "" {
		return c
	}
	return fallback
}

func endpointFlag(cfg Config) string {
	if cfg.Endpoint == "" {
		return ""
	}
	return " --endpoint-url " + cfg.Endpoint
}
