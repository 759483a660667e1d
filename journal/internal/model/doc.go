// Package model is an in-memory reference implementation of the journal's
// filesystem API, used to test package journal. (Doc to be completed.)
package model
