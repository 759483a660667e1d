package metalog

import "errors"

var (
	// ErrKeyNotFound is returned by Txn.Get for a key that has no value.
	ErrKeyNotFound = errors.New("key not found")
	// ErrTxnTooBig is returned by Set and Delete when the transaction
	// would pass the store's limits (MaxBatchSize, MaxBatchCount); the
	// transaction holds everything before the refused write.
	ErrTxnTooBig = errors.New("transaction too big")
	// ErrReadOnlyTxn is returned by Set and Delete of a read-only
	// transaction.
	ErrReadOnlyTxn = errors.New("write in a read-only transaction")
	// ErrClosed is returned by operations on a closed DB.
	ErrClosed = errors.New("metadata store closed")
	// ErrBroken is returned by every commit after a failed append could not
	// be undone (the log's end is unknown): the store must be reopened.
	ErrBroken = errors.New("metadata log broken by an earlier write error")
	// ErrCorrupt is returned by Open for a log it cannot read at all.
	ErrCorrupt = errors.New("metadata log corrupt")
)
