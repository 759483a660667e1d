// Package cdc splits byte streams into content-defined chunks with FastCDC
// (Xia et al., "FastCDC: a Fast and Efficient Content-Defined Chunking
// Approach for Data Deduplication", USENIX ATC 2016, and "The Design of
// Fast Content-Defined Chunking for Data Deduplication Based Storage
// Systems", IEEE TPDS 2020).
//
// # Content-defined chunking
//
// A chunk boundary is placed where a rolling hash of the last few dozen bytes
// matches a pattern, so boundaries move with the content: inserting or
// deleting bytes in a file changes only the chunks around the edit, and the
// rest of the file deduplicates against what is already stored. Fixed-size
// blocks would shift every boundary after the edit.
//
// FastCDC uses the gear hash, fp = fp<<1 + gear[b] for each byte b, where gear
// is a table of 256 random 64-bit values: one shift, one add and one table
// load per byte. Bit k of fp depends only on the last k+1 bytes, so the hash
// needs no explicit window. A position is a cut point when fp&mask == 0. The
// one-bits of each mask are spread over bits 16 to 60, so the condition
// depends on the last 61 bytes rather than on the few that feed the low bits.
//
// Cut-point skipping: no boundary is looked for in the first Min bytes of a
// chunk, and the hash starts from zero at byte Min, so those bytes are not
// even hashed. A chunk with no cut point is cut at Max bytes.
//
// # Normalized chunking
//
// With one mask of log2(Avg) bits, chunk sizes are roughly exponentially
// distributed: many small chunks, a long tail of large ones. Normalization
// level n uses a stricter mask of log2(Avg)+n bits while the chunk is shorter
// than Avg bytes and a looser mask of log2(Avg)-n bits after that, which
// concentrates sizes around Avg. Level 2, the default, is what the paper
// recommends: on random data it cuts the standard deviation of chunk sizes
// to about 40% of level 0's (see TestCut_Distribution) at no cost in speed,
// and the paper reports deduplication ratios close to plain CDC's.
//
// The inner loop rolls four bytes per iteration (a generalization of the
// 2020 paper's "rolling two bytes"), using tables pre-shifted by 1 to 3 bits
// and masks shifted to match, so the loop-carried dependency is one shift and
// one add per four bytes. It finds exactly the cut points of the
// byte-at-a-time algorithm; the tests compare the two.
//
// # Seeded gear table
//
// The gear table is generated from Params.Seed with splitmix64. A store
// derives the seed from its secret key, so the same file is cut at different
// places in different stores and chunk sizes, which are visible in packs and
// index files, do not reveal which known files a store holds. This is
// obfuscation, not a cryptographic guarantee: someone who can choose content
// written to a store and observe the resulting chunk sizes can learn about
// the table. Seed 0 is a valid seed, used by tests and DefaultParams.
//
// # Parameters are part of the store format
//
// Params (Min, Avg, Max, Normalization, Seed) are fixed when a store is
// created and recorded in its config. Changing any of them, or this package's
// algorithm, moves boundaries and silently ends deduplication against data
// already stored. testdata/golden.json pins the boundaries; refresh it only
// for a deliberate format change, with go test ./chunkstore/cdc -update.
//
// # Streaming contract
//
// Cutter.Cut(data) returns the length of the first chunk of data. It looks at
// no more than the first Max bytes, so its answer is final whenever data
// holds at least Max bytes or is the whole rest of the stream. With fewer
// bytes and no cut point found it returns len(data), which a caller must
// treat as a chunk only at end of input.
//
// Chunker does that bookkeeping for an io.Reader: it keeps at least Max bytes
// buffered (or everything up to EOF) before each cut, so chunk boundaries
// depend only on the content and Params, never on how the reader splits its
// reads. Chunks concatenate to the input; every chunk but the last has Min
// to Max bytes, the last 1 to Max; an empty stream has no chunks. Chunk.Data
// aliases the Chunker's buffer and is valid until the next Next or Reset.
// A Cutter is immutable and may be shared by many goroutines; a Chunker
// belongs to one goroutine.
package cdc
