package main

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The npm workload's project: popular packages (express, webpack,
// typescript, jest...), 461 in the lockfile, pinned by it.
var (
	//go:embed npm/package.json
	npmPackageJSON []byte
	//go:embed npm/package-lock.json
	npmPackageLock []byte
)

// npmCache is npm's cache holding every package of the lockfile, filled
// once (online) under the cache directory, outside the timed part; the timed
// `npm ci --offline` reads only it.
type npmCache struct{ dir string }

func (c npmCache) cache() string    { return filepath.Join(c.dir, "cache") }
func (c npmCache) userrc() string   { return filepath.Join(c.dir, "npmrc") }
func (c npmCache) ciArgs() []string { return c.args("ci", "--offline") }

// args are npm's arguments with the user's npmrc left out (an
// omit-lockfile-registry-resolved there changes what ci does).
func (c npmCache) args(a ...string) []string {
	return append(a, "--cache", c.cache(), "--userconfig", c.userrc(), "--ignore-scripts",
		"--no-audit", "--no-fund", "--no-update-notifier", "--loglevel=error")
}

// project writes package.json and package-lock.json into dir.
func (c npmCache) project(dir string) error {
	if err := os.WriteFile(filepath.Join(dir, "package.json"), npmPackageJSON, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "package-lock.json"), npmPackageLock, 0o644)
}

// setupNPM fills the npm cache under root once per lockfile, and checks
// that an offline install from it works.
func setupNPM(ctx context.Context, root string) (npmCache, error) {
	c := npmCache{filepath.Join(root, "npm-"+shortHash(npmPackageJSON, npmPackageLock))}
	stamp := filepath.Join(c.dir, ".filled")
	if _, err := os.Stat(stamp); err == nil {
		return c, nil
	}
	if _, err := exec.LookPath("npm"); err != nil {
		return c, fmt.Errorf("the npm-ci workload needs npm (apt-get install npm, or -only without npm-ci): %w", err)
	}
	fmt.Fprintf(os.Stderr, "fsbench: filling the npm cache in %s (once; needs the registry)\n", c.dir)
	proj := filepath.Join(c.dir, "project")
	if err := os.MkdirAll(proj, 0o755); err != nil {
		return c, err
	}
	if err := os.WriteFile(c.userrc(), nil, 0o644); err != nil {
		return c, err
	}
	if err := c.project(proj); err != nil {
		return c, err
	}
	if err := runCmd(ctx, proj, nil, "npm", c.args("ci")...); err != nil {
		return c, fmt.Errorf("fill the npm cache: %w", err)
	}
	os.RemoveAll(filepath.Join(proj, "node_modules"))
	if err := runCmd(ctx, proj, nil, "npm", c.ciArgs()...); err != nil {
		return c, fmt.Errorf("npm ci --offline from the filled cache: %w", err)
	}
	os.RemoveAll(filepath.Join(proj, "node_modules"))
	return c, os.WriteFile(stamp, nil, 0o644)
}

// goModCache is a module cache holding every module of a go.mod's build
// list, filled once; the timed `go mod download` reads it as a file://
// GOPROXY and writes a new GOMODCACHE on the target.
type goModCache struct {
	dir          string
	goMod, goSum []byte
	proxyURL     string // of the filled cache
}

// project writes go.mod and go.sum into dir and returns the environment
// of the offline download into dir/gomodcache.
func (c goModCache) project(dir string) ([]string, error) {
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), c.goMod, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), c.goSum, 0o644); err != nil {
		return nil, err
	}
	return c.env(filepath.Join(dir, "gomodcache"), c.proxyURL), nil
}

func (c goModCache) env(modcache, proxy string) []string {
	return []string{"GOMODCACHE=" + modcache, "GOPROXY=" + proxy, "GOFLAGS=-mod=mod",
		"GOSUMDB=off", "GONOSUMDB=*", "GOPRIVATE=", "GONOPROXY=", "GOTOOLCHAIN=local", "GOWORK=off"}
}

// setupGoMod fills the module cache for the go.mod at goModPath once per
// go.mod and go.sum, from the local module cache first, then GOPROXY.
func setupGoMod(ctx context.Context, root, goModPath string) (goModCache, error) {
	var c goModCache
	var err error
	if c.goMod, err = os.ReadFile(goModPath); err != nil {
		return c, err
	}
	if c.goSum, err = os.ReadFile(strings.TrimSuffix(goModPath, ".mod") + ".sum"); err != nil {
		return c, err
	}
	c.dir = filepath.Join(root, "gomod-"+shortHash(c.goMod, c.goSum))
	modcache := filepath.Join(c.dir, "modcache")
	c.proxyURL = "file://" + filepath.Join(modcache, "cache", "download")
	stamp := filepath.Join(c.dir, ".filled")
	if _, err := os.Stat(stamp); err == nil {
		return c, nil
	}
	fmt.Fprintf(os.Stderr, "fsbench: filling a Go module cache in %s (once)\n", c.dir)
	proj := filepath.Join(c.dir, "project")
	if err := os.MkdirAll(proj, 0o755); err != nil {
		return c, err
	}
	if _, err := c.project(proj); err != nil {
		return c, err
	}
	proxy := goEnv("GOPROXY")
	if local := goEnv("GOMODCACHE"); local != "" {
		proxy = "file://" + filepath.Join(local, "cache", "download") + "," + proxy
	}
	if err := runCmd(ctx, proj, c.env(modcache, proxy), "go", "mod", "download"); err != nil {
		return c, fmt.Errorf("fill the Go module cache: %w", err)
	}
	return c, os.WriteFile(stamp, nil, 0o644)
}

// goTarballs makes the tarballs of Go's src tree (all of it, and without
// src/cmd) in dir.
func goTarballs(ctx context.Context, dir string) (all, noCmd string, err error) {
	all, noCmd = filepath.Join(dir, "gosrc.tar"), filepath.Join(dir, "gosrc-nocmd.tar")
	if err := runCmd(ctx, "", nil, "tar", "-C", goEnv("GOROOT"), "-cf", all, "src"); err != nil {
		return "", "", fmt.Errorf("tar of the Go tree: %w", err)
	}
	if err := runCmd(ctx, "", nil, "tar", "-C", goEnv("GOROOT"), "--exclude=src/cmd", "-cf", noCmd, "src"); err != nil {
		return "", "", fmt.Errorf("tar of the Go tree: %w", err)
	}
	return all, noCmd, nil
}

// warm reads every file under the paths once, so that the first target
// of the first round does not read the workloads' inputs from disk.
func warm(paths ...string) error {
	buf := make([]byte, 1<<20)
	for _, p := range paths {
		err := filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return err
			}
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			defer f.Close()
			for {
				if _, err := f.Read(buf); err != nil {
					return nil
				}
			}
		})
		if err != nil {
			return fmt.Errorf("read the inputs: %w", err)
		}
	}
	return nil
}

func goEnv(name string) string {
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		if name == "GOROOT" {
			return "/usr/local/go"
		}
		return ""
	}
	return strings.TrimSpace(string(out))
}

func shortHash(parts ...[]byte) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write(p)
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// defaultCacheDir is where set-up keeps what it fills once.
func defaultCacheDir() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "cairn-fsbench")
	}
	return filepath.Join(os.TempDir(), "cairn-fsbench")
}
