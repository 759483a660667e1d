package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"syscall"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/cairnfs/cairn/chunkstore/backend"
)

// sdkError builds an error shaped like the SDK's for an HTTP answer with
// status and, when code is not "", an S3 error code.
func sdkError(operation string, status int, code string) error {
	var inner error = &smithy.GenericAPIError{Code: code, Message: "message from the server"}
	switch code {
	case "":
		inner = errors.New("http response with no body")
	case "NoSuchKey":
		inner = &types.NoSuchKey{Message: new("The specified key does not exist.")}
	case "NotFound":
		inner = &types.NotFound{}
	}
	return &smithy.OperationError{
		ServiceID:     "S3",
		OperationName: operation,
		Err: &awshttp.ResponseError{
			ResponseError: &smithyhttp.ResponseError{
				Response: &smithyhttp.Response{Response: &http.Response{StatusCode: status, Header: http.Header{}}},
				Err:      inner,
			},
			RequestID: "REQ1",
		},
	}
}

// sendError builds an error shaped like the SDK's when no answer came: the
// SDK still wraps it in a ResponseError, with status 0, after its retries.
func sendError(cause error) error {
	return &smithy.OperationError{
		ServiceID:     "S3",
		OperationName: "HeadObject",
		Err: &retry.MaxAttemptsError{
			Attempt: 3,
			Err: &awshttp.ResponseError{
				ResponseError: &smithyhttp.ResponseError{
					Response: &smithyhttp.Response{Response: &http.Response{}},
					Err: &smithyhttp.RequestSendError{Err: &url.Error{
						Op:  "Head",
						URL: "http://127.0.0.1:1/bucket/key",
						Err: cause,
					}},
				},
			},
		},
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestTranslate(t *testing.T) {
	tests := []struct {
		name string
		op   op
		err  error
		want error // sentinel; nil: none
	}{
		{"GetNoSuchKey", opGet, sdkError("GetObject", 404, "NoSuchKey"), backend.ErrNotFound},
		{"HeadNotFound", opStat, sdkError("HeadObject", 404, "NotFound"), backend.ErrNotFound},
		{"Head404NoCode", opStat, sdkError("HeadObject", 404, ""), backend.ErrNotFound},
		{"NoSuchBucket", opList, sdkError("ListObjectsV2", 404, "NoSuchBucket"), backend.ErrNotFound},
		{"InvalidRange", opGet, sdkError("GetObject", 416, "InvalidRange"), backend.ErrRange},
		{"Range416NoCode", opGet, sdkError("GetObject", 416, ""), backend.ErrRange},

		{"IfNoneMatchPreconditionFailed", opPutIfNoneMatch, sdkError("PutObject", 412, "PreconditionFailed"), backend.ErrConflict},
		{"IfMatchPreconditionFailed", opPutIfMatch, sdkError("PutObject", 412, "PreconditionFailed"), backend.ErrConflict},
		{"ConditionalRequestConflict", opPutIfMatch, sdkError("PutObject", 409, "ConditionalRequestConflict"), backend.ErrConflict},
		{"IfMatchMissingKey", opPutIfMatch, sdkError("PutObject", 404, "NoSuchKey"), backend.ErrConflict},
		{"IfMatchMissingKeyNoCode", opPutIfMatch, sdkError("PutObject", 404, ""), backend.ErrConflict},
		{"IfMatchMissingBucket", opPutIfMatch, sdkError("PutObject", 404, "NoSuchBucket"), backend.ErrNotFound},
		{"Conditional409UnknownCode", opPutIfNoneMatch, sdkError("PutObject", 409, "SomethingNew"), backend.ErrConflict},
		{"Unconditional409", opPut, sdkError("PutObject", 409, "ExistingObjectIsDirectory"), nil},
		{"Precondition412NoCode", opPut, sdkError("PutObject", 412, ""), backend.ErrConflict},

		{"AccessDenied", opGet, sdkError("GetObject", 403, "AccessDenied"), backend.ErrPermission},
		{"SignatureDoesNotMatch", opPut, sdkError("PutObject", 403, "SignatureDoesNotMatch"), backend.ErrPermission},
		{"InvalidAccessKeyId", opList, sdkError("ListObjectsV2", 403, "InvalidAccessKeyId"), backend.ErrPermission},
		{"Head403NoCode", opStat, sdkError("HeadObject", 403, ""), backend.ErrPermission},
		{"Status401", opStat, sdkError("HeadObject", 401, ""), backend.ErrPermission},
		{"VersitygwUnknownAccessKey", opList, sdkError("ListObjectsV2", 404, "XAdminUserNotFound"), backend.ErrPermission},

		{"SlowDown", opPut, sdkError("PutObject", 503, "SlowDown"), backend.ErrUnavailable},
		{"InternalError", opGet, sdkError("GetObject", 500, "InternalError"), backend.ErrUnavailable},
		{"Status502NoCode", opStat, sdkError("HeadObject", 502, ""), backend.ErrUnavailable},
		{"Status429", opList, sdkError("ListObjectsV2", 429, ""), backend.ErrUnavailable},
		{"NotImplemented", opPutIfNoneMatch, sdkError("PutObject", 501, "NotImplemented"), nil},
		{"BadRequest", opPut, sdkError("PutObject", 400, "InvalidArgument"), nil},
		{"Redirect", opOpen, sdkError("HeadBucket", 301, ""), nil},

		{"ConnectionRefused", opStat, sendError(refused()), backend.ErrUnavailable},
		{"DNS", opStat, sendError(&net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "s3.invalid", IsNotFound: true}}), backend.ErrUnavailable},
		{"Timeout", opGet, sendError(timeoutErr{}), backend.ErrUnavailable},
		{"BodyCutShort", opGet, io.ErrUnexpectedEOF, backend.ErrUnavailable},
		{"BodyReset", opGet, &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, backend.ErrUnavailable},
		{"RetryQuotaExhausted", opPut, fmt.Errorf("failed to get rate limit token, %w", ratelimit.QuotaExceededError{Available: 0, Requested: 5}), backend.ErrUnavailable},
		{"NoCredentials", opOpen, &smithy.OperationError{ServiceID: "S3", OperationName: "HeadBucket",
			Err: &v4.SigningError{Err: fmt.Errorf("failed to retrieve credentials: %w", sendError(refused()))}}, backend.ErrPermission},
		{"Unknown", opGet, errors.New("something else"), nil},
	}
	sentinels := []error{backend.ErrNotFound, backend.ErrConflict, backend.ErrRange, backend.ErrUnavailable, backend.ErrPermission, backend.ErrInvalidKey}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := translate(context.Background(), tc.op, "refs/main", tc.err)
			if got == nil {
				t.Fatalf("translate returned nil")
			}
			for _, s := range sentinels {
				if is, want := errors.Is(got, s), s == tc.want; is != want {
					t.Errorf("errors.Is(%v, %v) = %v, want %v", got, s, is, want)
				}
			}
			if !errors.Is(got, tc.err) {
				t.Errorf("the SDK's error is no longer wrapped: %v", got)
			}
			var ae smithy.APIError
			if errors.As(tc.err, &ae) && !errors.As(got, &ae) {
				t.Errorf("errors.As(smithy.APIError) lost")
			}
		})
	}
}

func TestTranslate_DeleteMissing(t *testing.T) {
	if err := translate(context.Background(), opDelete, "k", sdkError("DeleteObject", 404, "NoSuchKey")); err != nil {
		t.Errorf("Delete of a missing key: %v, want nil", err)
	}
	if err := translate(context.Background(), opDelete, "k", sdkError("DeleteObject", 404, "NoSuchBucket")); !errors.Is(err, backend.ErrNotFound) {
		t.Errorf("Delete in a missing bucket: %v, want ErrNotFound", err)
	}
	if err := translate(context.Background(), opDelete, "k", nil); err != nil {
		t.Errorf("translate(nil) = %v", err)
	}
}

func TestTranslate_CallerContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// A cancelled caller is not a backend failure, even when the request
	// died on the network.
	for _, err := range []error{
		&smithy.OperationError{ServiceID: "S3", OperationName: "GetObject", Err: &smithy.CanceledError{Err: context.Canceled}},
		sendError(refused()),
	} {
		got := translate(ctx, opGet, "k", err)
		if !errors.Is(got, context.Canceled) {
			t.Errorf("translate(cancelled ctx, %v) = %v, want context.Canceled", err, got)
		}
		if errors.Is(got, backend.ErrUnavailable) {
			t.Errorf("translate(cancelled ctx, %v) = %v: ErrUnavailable for the caller's own cancellation", err, got)
		}
	}
}

func refused() error {
	return &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
}

func TestOpenError(t *testing.T) {
	cfg := Config{Bucket: "b", Endpoint: "http://127.0.0.1:1", Region: "us-east-1"}
	tests := []struct {
		name string
		err  error
		want string
		is   error
	}{
		{"Refused", sendError(refused()),
			"cannot reach S3 endpoint http://127.0.0.1:1: connection refused; check --store's endpoint= and that the server is running",
			backend.ErrUnavailable},
		{"DNS", sendError(&net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "s3.invalid", IsNotFound: true}}),
			"cannot reach S3 endpoint http://127.0.0.1:1: cannot resolve host s3.invalid; check --store's endpoint= and that the server is running",
			backend.ErrUnavailable},
		{"Timeout", sendError(timeoutErr{}),
			"cannot reach S3 endpoint http://127.0.0.1:1: timed out; check --store's endpoint= and that the server is running",
			backend.ErrUnavailable},
		{"NoBucket", sdkError("ListObjectsV2", 404, "NoSuchBucket"),
			`bucket "b" does not exist at http://127.0.0.1:1; create it first (for example: aws s3 mb s3://b --endpoint-url http://127.0.0.1:1), or fix the bucket name in --store`,
			backend.ErrNotFound},
		{"Denied", sdkError("ListObjectsV2", 403, "AccessDenied"),
			`S3 at http://127.0.0.1:1 refused access to bucket "b" (AccessDenied); check the credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE) and the bucket's permissions`,
			backend.ErrPermission},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := openError(context.Background(), cfg, tc.err)
			if got.Error() != tc.want {
				t.Errorf("message:\n  %s\nwant\n  %s", got, tc.want)
			}
			if !errors.Is(got, tc.is) || !errors.Is(got, tc.err) {
				t.Errorf("%v does not wrap %v and the SDK error", got, tc.is)
			}
		})
	}
}
