package s3

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cairnfs/cairn/chunkstore/backend"
)

// Defaults applied by Open to zero-valued Config fields.
const (
	DefaultRegion          = "us-east-1"
	DefaultMaxAttempts     = 3
	DefaultMaxBackoff      = 2 * time.Second
	DefaultConnectTimeout  = 3 * time.Second
	DefaultResponseTimeout = 30 * time.Second
)

// urlSyntax is quoted in ParseURL's errors.
const urlSyntax = "s3://BUCKET[/PREFIX][?endpoint=URL&region=REGION&path_style=true|false&profile=NAME]"

// Config locates a bucket and prefix and says how to talk to it. Its zero
// value is not usable (Bucket is required); every other field has a working
// default. It is plain data: Validate checks it, Open applies the defaults.
type Config struct {
	// Bucket is the bucket's name. Required.
	Bucket string
	// Prefix is prepended, followed by "/", to every object key: key
	// "refs/main" with prefix "team/a" is stored as "team/a/refs/main".
	// No leading or trailing slash. Default "": keys at the bucket's root.
	Prefix string
	// Endpoint is the base URL of an S3-compatible server
	// ("http://127.0.0.1:7070", "https://minio.example.com:9000").
	// Default "": AWS S3, with the endpoint derived from Region.
	Endpoint string
	// Region is the signing region. Default "": the SDK's chain (AWS_REGION,
	// AWS_DEFAULT_REGION, the profile's region), else "us-east-1".
	Region string
	// PathStyle addresses the bucket as ENDPOINT/BUCKET rather than as the
	// host name BUCKET.ENDPOINT. Most S3-compatible servers need it; ParseURL
	// turns it on when an endpoint is given. Default false.
	PathStyle bool

	// AccessKeyID and SecretAccessKey are static credentials; set both or
	// neither. Default "": the SDK's standard chain (AWS_ACCESS_KEY_ID and
	// AWS_SECRET_ACCESS_KEY, the shared config and credentials files, SSO,
	// web identity, container and instance roles).
	AccessKeyID     string
	SecretAccessKey string
	// SessionToken goes with temporary static credentials. Default "".
	SessionToken string
	// Profile selects a profile of the shared config files. Default "":
	// AWS_PROFILE, else "default".
	Profile string

	// MaxAttempts bounds the attempts per request, the first included, for
	// errors worth retrying (throttling, 5xx, connection failures), with
	// jittered exponential backoff between them. Conditional puts are
	// attempted once whatever this says (see Backend.Put). Default 0: 3.
	MaxAttempts int
	// MaxBackoff caps the delay between two attempts. Default 0: 2s.
	MaxBackoff time.Duration
	// ConnectTimeout bounds the TCP connect and the TLS handshake of one
	// attempt. Default 0: 3s.
	ConnectTimeout time.Duration
	// ResponseTimeout bounds the wait for the response headers once the
	// request, body included, has been sent. It does not limit how long a
	// response body takes to stream. Default 0: 30s.
	ResponseTimeout time.Duration
}

// Validate reports the first problem with c, if any. It does not touch the
// network.
func (c Config) Validate() error {
	if err := validateBucket(c.Bucket); err != nil {
		return err
	}
	if c.Prefix != "" {
		if err := backend.ValidateKey(c.Prefix); err != nil {
			return fmt.Errorf("s3 prefix %q: want slash-separated segments with no leading, trailing or doubled slash and no \".\" or \"..\": %w", c.Prefix, err)
		}
	}
	if c.Endpoint != "" {
		if err := validateEndpoint(c.Endpoint); err != nil {
			return err
		}
	}
	if (c.AccessKeyID == "") != (c.SecretAccessKey == "") {
		return errors.New("s3 credentials: set both the access key ID and the secret access key, or neither to use the AWS SDK's credential chain")
	}
	if c.SessionToken != "" && c.AccessKeyID == "" {
		return errors.New("s3 credentials: a session token needs an access key ID and a secret access key")
	}
	if c.MaxAttempts < 0 {
		return fmt.Errorf("s3 max attempts %d: must be positive (0 means %d)", c.MaxAttempts, DefaultMaxAttempts)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"max backoff", c.MaxBackoff},
		{"connect timeout", c.ConnectTimeout},
		{"response timeout", c.ResponseTimeout},
	} {
		if d.v < 0 {
			return fmt.Errorf("s3 %s %v: must not be negative (0 means the default)", d.name, d.v)
		}
	}
	return nil
}

// withDefaults returns c with its zero-valued tunables set to the defaults.
// Region is left alone: its default comes from the SDK's chain.
func (c Config) withDefaults() Config {
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.ResponseTimeout == 0 {
		c.ResponseTimeout = DefaultResponseTimeout
	}
	return c
}

// location is the human-readable s3://bucket/prefix form, with no secrets.
func (c Config) location() string {
	if c.Prefix == "" {
		return "s3://" + c.Bucket
	}
	return "s3://" + c.Bucket + "/" + c.Prefix
}

// ParseURL parses a store URL of the form
//
//	s3://BUCKET[/PREFIX][?endpoint=URL&region=REGION&path_style=BOOL&profile=NAME]
//
// PathStyle defaults to true when endpoint is given, false otherwise.
// Credentials never go in the URL: they come from the SDK's chain
// (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, profiles, roles).
// The result is validated.
func ParseURL(raw string) (Config, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Config{}, fmt.Errorf("store URL %q: %w; want %s", raw, err, urlSyntax)
	}
	shown := displayURL(u)
	if u.Scheme != "s3" {
		return Config{}, fmt.Errorf("store URL %q: scheme is %q, want s3; want %s", shown, u.Scheme, urlSyntax)
	}
	if u.Opaque != "" {
		return Config{}, fmt.Errorf("store URL %q: missing \"//\" after \"s3:\"; want %s", shown, urlSyntax)
	}
	if u.User != nil {
		return Config{}, fmt.Errorf("store URL %q: credentials must not be in the URL; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or use a profile", shown)
	}
	if u.Fragment != "" {
		return Config{}, fmt.Errorf("store URL %q: unexpected fragment %q; want %s", shown, "#"+u.Fragment, urlSyntax)
	}
	if u.Host == "" {
		return Config{}, fmt.Errorf("store URL %q: no bucket name; want %s", shown, urlSyntax)
	}
	c := Config{
		Bucket: u.Host,
		Prefix: strings.TrimSuffix(strings.TrimPrefix(u.Path, "/"), "/"),
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return Config{}, fmt.Errorf("store URL %q: bad query: %w; want %s", shown, err, urlSyntax)
	}
	pathStyleSet := false
	for _, name := range slices.Sorted(maps.Keys(q)) {
		vals := q[name]
		if len(vals) != 1 {
			return Config{}, fmt.Errorf("store URL %q: parameter %q given %d times", shown, name, len(vals))
		}
		v := vals[0]
		switch name {
		case "endpoint":
			c.Endpoint = v
		case "region":
			c.Region = v
		case "profile":
			c.Profile = v
		case "path_style":
			b, err := strconv.ParseBool(v)
			if err != nil {
				return Config{}, fmt.Errorf("store URL %q: path_style=%q: want true or false", shown, v)
			}
			c.PathStyle = b
			pathStyleSet = true
		default:
			return Config{}, fmt.Errorf("store URL %q: unknown parameter %q; known: endpoint, region, path_style, profile", shown, name)
		}
	}
	if !pathStyleSet {
		c.PathStyle = c.Endpoint != ""
	}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("store URL %q: %w", shown, err)
	}
	return c, nil
}

// displayURL is u for messages: passwords, in u or in its endpoint
// parameter, are blanked.
func displayURL(u *url.URL) string {
	c := *u
	if q, err := url.ParseQuery(c.RawQuery); err == nil {
		if eu, err := url.Parse(q.Get("endpoint")); err == nil && eu.User != nil {
			q.Set("endpoint", eu.Redacted())
			c.RawQuery = q.Encode()
		}
	}
	return c.Redacted()
}

func validateBucket(b string) error {
	if b == "" {
		return errors.New("s3 bucket: no bucket name given")
	}
	if len(b) > 255 {
		return fmt.Errorf("s3 bucket %.20q...: name longer than 255 bytes", b)
	}
	for _, r := range b {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-', r == '_':
		default:
			return fmt.Errorf("s3 bucket %q: character %q not allowed; bucket names use letters, digits, '.', '-' and '_'", b, r)
		}
	}
	return nil
}

func validateEndpoint(e string) error {
	u, err := url.Parse(e)
	if err != nil {
		return fmt.Errorf("s3 endpoint %q: %w; want a URL like http://127.0.0.1:7070", e, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("s3 endpoint %q: scheme must be http or https; want a URL like http://127.0.0.1:7070", e)
	}
	if u.Host == "" {
		return fmt.Errorf("s3 endpoint %q: no host; want a URL like http://127.0.0.1:7070", e)
	}
	if u.User != nil {
		return fmt.Errorf("s3 endpoint %q: credentials must not be in the endpoint URL", u.Redacted())
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("s3 endpoint %q: must not have a query or fragment; if it belongs to the store URL, escape it (endpoint=%s)", e, url.QueryEscape(e))
	}
	return nil
}
