// Command cairn is the command-line interface of the cairn workspace
// filesystem. See the README for the verbs.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/cairnfs/cairn/daemon"
	"github.com/cairnfs/cairn/sandbox"
)

func main() {
	sandbox.MaybeInit()       // the sandbox's init and command starter: never return
	daemon.MaybeFlushHelper() // a daemon's flush helper: never returns
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	app := newApp()
	err := app.RunContext(ctx, interspersed(app, os.Args))
	stop()
	os.Exit(exitCode(os.Stderr, err))
}
