package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/cairnfs/cairn/chunkstore"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func newApp() *cli.App {
	app := &cli.App{
		Name:    "cairn",
		Usage:   "a content-addressed, snapshotting filesystem for AI-agent workspaces",
		Version: version,
		Flags: []cli.Flag{
			&cli.StringFlag{
				Name:    "home",
				Usage:   "state directory: journals, cache, sockets and the default local store (default: /var/lib/cairn as root, else $XDG_DATA_HOME/cairn)",
				EnvVars: []string{"CAIRN_HOME"},
			},
			&cli.StringFlag{
				Name:    "store",
				Usage:   "the store: a directory, file:///PATH or s3://BUCKET/PREFIX?endpoint=URL&region=R (default: HOME/store)",
				EnvVars: []string{"CAIRN_STORE"},
			},
		},
		Commands:        []*cli.Command{newInitCommand()},
		HideHelpCommand: true,
		ExitErrHandler:  func(*cli.Context, error) {}, // exit codes are decided in exitCode
		OnUsageError:    onUsageError,
	}
	for _, c := range app.Commands {
		c.OnUsageError = onUsageError
	}
	return app
}

// onUsageError marks flag-parsing errors as usage errors (exit code 2).
func onUsageError(_ *cli.Context, err error, _ bool) error {
	return usageError{fmt.Errorf("%w (see --help)", err)}
}

// globals are the options every verb shares.
type globals struct {
	Home  string // state directory
	Store string // store URL
}

func globalsFrom(c *cli.Context) (globals, error) {
	g := globals{Home: c.String("home"), Store: c.String("store")}
	if g.Home == "" {
		g.Home = defaultHome()
	}
	abs, err := filepath.Abs(g.Home)
	if err != nil {
		return g, usageError{fmt.Errorf("--home %q: %w", g.Home, err)}
	}
	g.Home = abs
	if g.Store == "" {
		g.Store = filepath.Join(g.Home, "store")
	}
	return g, nil
}

func defaultHome() string {
	if os.Geteuid() == 0 {
		return "/var/lib/cairn"
	}
	if d := os.Getenv("XDG_DATA_HOME"); d != "" {
		return filepath.Join(d, "cairn")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "share", "cairn")
	}
	return ".cairn"
}

// usageError marks errors in how cairn was called (exit code 2).
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

// Exit codes, documented in the README.
const (
	exitOK       = 0
	exitError    = 1 // the operation failed
	exitUsage    = 2 // bad flags or arguments
	exitNotFound = 3 // a store, workspace or snapshot does not exist
	exitConflict = 4 // already exists, or lost a compare-and-swap
	exitCorrupt  = 5 // stored data failed verification
)

// exitCode prints err for a person and maps it to the process exit code.
func exitCode(w io.Writer, err error) int {
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(w, "cairn: %v\n", err)
	var u usageError
	switch {
	case errors.As(err, &u), errors.Is(err, chunkstore.ErrInvalid):
		return exitUsage
	case errors.Is(err, chunkstore.ErrCorrupt):
		return exitCorrupt
	case errors.Is(err, chunkstore.ErrNotFound):
		return exitNotFound
	case errors.Is(err, chunkstore.ErrConflict):
		return exitConflict
	}
	return exitError
}
