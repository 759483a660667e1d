package s3

import (
	"strings"
	"testing"
	"time"
)

func TestParseURL(t *testing.T) {
	tests := []struct {
		raw  string
		want Config
	}{
		{"s3://bucket", Config{Bucket: "bucket"}},
		{"s3://bucket/", Config{Bucket: "bucket"}},
		{"s3://bucket/team/a/", Config{Bucket: "bucket", Prefix: "team/a"}},
		{"s3://my.bucket-1/p", Config{Bucket: "my.bucket-1", Prefix: "p"}},
		{"s3://b/p?region=eu-west-1", Config{Bucket: "b", Prefix: "p", Region: "eu-west-1"}},
		{"s3://b/p?profile=dev", Config{Bucket: "b", Prefix: "p", Profile: "dev"}},
		{"s3://b/p?endpoint=http://127.0.0.1:7070",
			Config{Bucket: "b", Prefix: "p", Endpoint: "http://127.0.0.1:7070", PathStyle: true}},
		{"s3://b/p?endpoint=https%3A%2F%2Fminio.example.com%3A9000&region=r1",
			Config{Bucket: "b", Prefix: "p", Endpoint: "https://minio.example.com:9000", Region: "r1", PathStyle: true}},
		{"s3://b/p?endpoint=https://s3.example.com&path_style=false",
			Config{Bucket: "b", Prefix: "p", Endpoint: "https://s3.example.com", PathStyle: false}},
		{"s3://b?path_style=true", Config{Bucket: "b", PathStyle: true}},
		{"s3://b?path_style=1", Config{Bucket: "b", PathStyle: true}},
	}
	for _, tc := range tests {
		t.Run(tc.raw, func(t *testing.T) {
			got, err := ParseURL(tc.raw)
			if err != nil {
				t.Fatalf("ParseURL: %v", err)
			}
			if got != tc.want {
				t.Errorf("ParseURL =\n  %+v\nwant\n  %+v", got, tc.want)
			}
		})
	}
}

func TestParseURL_Errors(t *testing.T) {
	tests := []struct {
		raw  string
		want string // in the message
	}{
		{"", "scheme is \"\", want s3"},
		{"/var/lib/cairn/store", "scheme is \"\", want s3"},
		{"file:///x", "scheme is \"file\", want s3"},
		{"S3://b/p", ""}, // url.Parse lowercases the scheme: accepted
		{"s3:bucket/p", `missing "//"`},
		{"s3:///prefix", "no bucket name"},
		{"s3://b:9000/p", "character ':' not allowed"},
		{"s3://key:secret@b/p", "credentials must not be in the URL"},
		{"s3://b/p?foo=1", `unknown parameter "foo"`},
		{"s3://b/p?region=a&region=b", `"region" given 2 times`},
		{"s3://b/p?path_style=maybe", "want true or false"},
		{"s3://b/p?endpoint=ftp://host", "scheme must be http or https"},
		{"s3://b/p?endpoint=127.0.0.1:7070", "want a URL like http://127.0.0.1:7070"},
		{"s3://b/p?endpoint=http://", "no host"},
		{"s3://b/p?endpoint=http://u:pw@host", "credentials must not be in the endpoint URL"},
		{"s3://b/a//c", "s3 prefix \"a//c\""},
		{"s3://b/a/../c", "s3 prefix"},
		{"s3://b/p#frag", "unexpected fragment"},
		{"s3://b/p?x=%zz", "bad query"},
		{"s3://%zz/p", "want s3://BUCKET"},
	}
	for _, tc := range tests {
		t.Run(tc.raw, func(t *testing.T) {
			_, err := ParseURL(tc.raw)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("ParseURL: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("ParseURL(%q) succeeded, want an error containing %q", tc.raw, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ParseURL(%q) error\n  %v\nshould contain\n  %s", tc.raw, err, tc.want)
			}
			if strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), ":pw@") {
				t.Errorf("error leaks a secret: %v", err)
			}
		})
	}
}

func TestConfig_Validate(t *testing.T) {
	ok := Config{Bucket: "b"}
	if err := ok.Validate(); err != nil {
		t.Fatalf("minimal config: %v", err)
	}
	tests := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"NoBucket", func(c *Config) { c.Bucket = "" }, "no bucket name"},
		{"SlashInBucket", func(c *Config) { c.Bucket = "a/b" }, "not allowed"},
		{"PrefixLeadingSlash", func(c *Config) { c.Prefix = "/p" }, "prefix"},
		{"PrefixTrailingSlash", func(c *Config) { c.Prefix = "p/" }, "prefix"},
		{"AccessKeyOnly", func(c *Config) { c.AccessKeyID = "k" }, "set both"},
		{"SecretOnly", func(c *Config) { c.SecretAccessKey = "s" }, "set both"},
		{"TokenAlone", func(c *Config) { c.SessionToken = "t" }, "session token"},
		{"NegativeAttempts", func(c *Config) { c.MaxAttempts = -1 }, "max attempts"},
		{"NegativeBackoff", func(c *Config) { c.MaxBackoff = -time.Second }, "max backoff"},
		{"NegativeConnectTimeout", func(c *Config) { c.ConnectTimeout = -time.Second }, "connect timeout"},
		{"NegativeResponseTimeout", func(c *Config) { c.ResponseTimeout = -time.Second }, "response timeout"},
		{"BadEndpoint", func(c *Config) { c.Endpoint = "localhost:9000" }, "endpoint"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.mod(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestConfig_Defaults(t *testing.T) {
	c := Config{Bucket: "b"}.withDefaults()
	if c.MaxAttempts != DefaultMaxAttempts || c.MaxBackoff != DefaultMaxBackoff ||
		c.ConnectTimeout != DefaultConnectTimeout || c.ResponseTimeout != DefaultResponseTimeout {
		t.Errorf("withDefaults() = %+v", c)
	}
	if c.Region != "" {
		t.Errorf("withDefaults set Region %q; it must come from the SDK's chain", c.Region)
	}
	if got, want := (Config{Bucket: "b"}).location(), "s3://b"; got != want {
		t.Errorf("location() = %q, want %q", got, want)
	}
	if got, want := (Config{Bucket: "b", Prefix: "x/y", AccessKeyID: "k", SecretAccessKey: "s"}).location(), "s3://b/x/y"; got != want {
		t.Errorf("location() = %q, want %q", got, want)
	}
}
