// Package backendtest is the conformance suite every store backend passes.
// It is the executable form of the backend.Backend contract: run it from the
// backend's own tests with a constructor that returns a fresh, empty backend.
package backendtest
