// Package backend defines the object-storage contract that every cairn store
// backend implements (a local directory, S3), its sentinel errors, and the
// capability description callers consult instead of type switches.
//
// A backend is deliberately dumb: it stores opaque objects under
// slash-separated keys. It knows nothing of packs, blobs or snapshots. The
// content-addressed layer (package chunkstore) is built on top and is the only
// intended caller.
//
// Every implementation must pass the conformance suite in package
// backendtest; that suite, not this comment, is the executable definition of
// the contract.
package backend
