// Package layering holds only a test: it checks that the import arrows of
// DESIGN.md point down (chunkstore <- journal <- fs <- daemon <- cmd/cairn;
// sandbox and netpolicy import no project package).
package layering
