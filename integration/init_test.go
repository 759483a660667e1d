package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairnfs/cairn/chunkstore/backend/s3/s3test"
)

func TestInit_LocalDefault(t *testing.T) {
	home := t.TempDir()
	env := []string{"CAIRN_HOME=" + home}
	r := cairn(t, env, "init")
	if r.code != 0 || !strings.Contains(r.stdout, "created cairn store") {
		t.Fatalf("cairn init: code %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(home, "store", "config")); err != nil {
		t.Fatalf("zero-configuration init did not create HOME/store/config: %v", err)
	}
	r = cairn(t, env, "init")
	if r.code != 4 || !strings.Contains(r.stderr, "already exists") {
		t.Fatalf("second init: code %d (want 4), stderr: %s", r.code, r.stderr)
	}
}

func TestInit_JSONHidesKey(t *testing.T) {
	store := filepath.Join(t.TempDir(), "s")
	r := cairn(t, nil, "--store", store, "init", "--json")
	if r.code != 0 {
		t.Fatalf("code %d: %s", r.code, r.stderr)
	}
	var cfg map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &cfg); err != nil {
		t.Fatalf("--json output is not JSON: %v\n%s", err, r.stdout)
	}
	if cfg["hash_key"] != "" || cfg["chunker"] == nil || cfg["version"] != 1.0 {
		t.Fatalf("--json output: %v", cfg)
	}
	raw, err := os.ReadFile(filepath.Join(store, "config"))
	if err != nil || !strings.Contains(string(raw), `"hash_key": "`) || strings.Contains(string(raw), `"hash_key": ""`) {
		t.Fatalf("stored config has no key: %s %v", raw, err)
	}
}

func TestInit_BadInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"UnknownScheme", []string{"--store", "ftp://host/x", "init"}, 2, "unknown scheme"},
		{"ExtraArgument", []string{"--store", t.TempDir(), "init", "extra"}, 2, "no arguments"},
		{"UnknownFlag", []string{"init", "--bogus"}, 2, "bogus"},
		{"BadS3URL", []string{"--store", "s3://", "init"}, 2, "bucket"},
		{"UnreachableS3", []string{"--store", "s3://b/p?endpoint=http://127.0.0.1:1&region=us-east-1", "init"}, 1, "cannot reach S3 endpoint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := cairn(t, []string{"AWS_ACCESS_KEY_ID=k", "AWS_SECRET_ACCESS_KEY=s"}, tc.args...)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
				t.Fatalf("code %d (want %d), stderr %q (want %q)", r.code, tc.code, r.stderr, tc.want)
			}
			if strings.Contains(r.stderr, "panic") || strings.Count(strings.TrimSpace(r.stderr), "\n") > 3 {
				t.Fatalf("error is not a short message: %s", r.stderr)
			}
		})
	}
}

func TestInit_S3(t *testing.T) {
	srv := s3test.Start(t)
	bucket := srv.NewBucket(t)
	env := []string{"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey}
	url := "s3://" + bucket + "/team?endpoint=" + srv.Endpoint + "&region=" + srv.Region
	r := cairn(t, env, "--store", url, "init")
	if r.code != 0 || !strings.Contains(r.stdout, "s3://"+bucket+"/team") {
		t.Fatalf("init on S3: code %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	if r := cairn(t, env, "--store", url, "init"); r.code != 4 {
		t.Fatalf("second init on S3: code %d, stderr %s", r.code, r.stderr)
	}
	missing := "s3://no-such-bucket/x?endpoint=" + srv.Endpoint + "&region=" + srv.Region
	if r := cairn(t, env, "--store", missing, "init"); r.code == 0 || !strings.Contains(r.stderr, "does not exist") {
		t.Fatalf("init on a missing bucket: code %d, stderr %s", r.code, r.stderr)
	}
	bad := []string{"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=wrong"}
	if r := cairn(t, bad, "--store", url, "init"); r.code == 0 || !strings.Contains(r.stderr, "credentials") {
		t.Fatalf("init with a wrong secret: code %d, stderr %s", r.code, r.stderr)
	}
}
