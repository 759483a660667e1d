package fs

import (
	"context"
	"errors"
	"testing"
)

// The request context is done exactly when the kernel's cancel channel
// closes (an INTERRUPT), with no goroutine to watch it.
func TestReqCtx(t *testing.T) {
	cancel := make(chan struct{})
	c, stop := ctx(cancel)
	defer stop()
	if err := c.Err(); err != nil {
		t.Fatalf("Err before the interrupt: %v", err)
	}
	select {
	case <-c.Done():
		t.Fatal("done before the interrupt")
	default:
	}
	close(cancel)
	<-c.Done()
	if err := c.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Err after the interrupt: %v", err)
	}
	// A derived context follows it.
	d, dstop := context.WithCancel(c)
	defer dstop()
	<-d.Done()
	// No cancel channel: never done.
	if n, _ := ctx(nil); n.Err() != nil || n.Done() != nil {
		t.Fatal("a request without a cancel channel is done")
	}
}
