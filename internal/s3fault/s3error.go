package s3fault

import (
	"encoding/xml"
	"net/http"
	"strconv"
	"strings"
)

// codes are the S3 error codes S3 answers with each status, for Error
// faults that give no Code.
var codes = map[int]string{
	http.StatusBadRequest:                   "InvalidRequest",
	http.StatusForbidden:                    "AccessDenied",
	http.StatusNotFound:                     "NoSuchKey",
	http.StatusMethodNotAllowed:             "MethodNotAllowed",
	http.StatusConflict:                     "OperationAborted",
	http.StatusPreconditionFailed:           "PreconditionFailed",
	http.StatusRequestedRangeNotSatisfiable: "InvalidRange",
	http.StatusTooManyRequests:              "SlowDown",
	http.StatusInternalServerError:          "InternalError",
	http.StatusNotImplemented:               "NotImplemented",
	http.StatusBadGateway:                   "BadGateway",
	http.StatusServiceUnavailable:           "SlowDown",
	http.StatusGatewayTimeout:               "GatewayTimeout",
}

// defaultCode returns the S3 error code for status: the one S3 uses, else
// the status text without spaces ("Unauthorized", "RequestTimeout").
func defaultCode(status int) string {
	if c, ok := codes[status]; ok {
		return c
	}
	if t := http.StatusText(status); t != "" {
		return strings.ReplaceAll(strings.ReplaceAll(t, " ", ""), "-", "")
	}
	return "Status" + strconv.Itoa(status)
}

// s3Error is the body of an S3 error response.
type s3Error struct {
	XMLName   xml.Name `xml:"Error"`
	Code      string   `xml:"Code"`
	Message   string   `xml:"Message"`
	Resource  string   `xml:"Resource"`
	RequestID string   `xml:"RequestId"`
}

// writeError answers r with status and an S3 XML error body, the way S3
// does: Content-Type application/xml, x-amz-request-id, and no body for a
// HEAD request (net/http drops it).
func writeError(w http.ResponseWriter, r *http.Request, status int, code, msg, requestID string) {
	body, err := xml.Marshal(s3Error{Code: code, Message: msg, Resource: r.URL.Path, RequestID: requestID})
	if err != nil {
		panic(err) // strings always marshal
	}
	body = append([]byte(xml.Header), body...)
	h := w.Header()
	h.Set("Content-Type", "application/xml")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Amz-Request-Id", requestID)
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
