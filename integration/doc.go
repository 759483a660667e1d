// Package integration holds end-to-end tests that drive the built cairn
// binary as a user would, against real stores (a local directory, and S3
// through versitygw on loopback).
package integration
