package journal

import "encoding/binary"

// Badger key layout. Meta keys are global; everything else lives under the
// current epoch, so that Rollback can switch to a fresh, empty namespace in
// O(1) and drop the old one in the background.
//
//	"m" name                               meta values (meta.go)
//	"e" epoch(4) "i" ino(8)                inode record (record.go)
//	"e" epoch(4) "d" parent(8) name        dentry: child ino(8) | type(1)
//	"e" epoch(4) "p" ino(8) parent(8) name a name of a non-directory (for dirty propagation)
//	"e" epoch(4) "x" ino(8) name           xattr value
//	"e" epoch(4) "D" ino(8)                dirty marker: generation(8) when last changed
//	"e" epoch(4) "O" ino(8)                orphan: unlinked while open (handle.go)
//	"e" epoch(4) "W" ino(8)                open for passthrough writing (handle.go)
//	"e" epoch(4) "U" ino(8)                a running commit's record to save once its snapshot is the head (commit.go)
//
// Integers are big endian so keys sort numerically.

func metaKey(name string) []byte { return append([]byte("m"), name...) }

func epochPrefix(epoch uint32) []byte {
	return binary.BigEndian.AppendUint32([]byte{'e'}, epoch)
}

func inoKey(epoch uint32, kind byte, ino Ino) []byte {
	k := append(epochPrefix(epoch), kind)
	return binary.BigEndian.AppendUint64(k, uint64(ino))
}

func inodeKey(epoch uint32, ino Ino) []byte  { return inoKey(epoch, 'i', ino) }
func dirtyKey(epoch uint32, ino Ino) []byte  { return inoKey(epoch, 'D', ino) }
func orphanKey(epoch uint32, ino Ino) []byte { return inoKey(epoch, 'O', ino) }
func writerKey(epoch uint32, ino Ino) []byte { return inoKey(epoch, 'W', ino) }
func updateKey(epoch uint32, ino Ino) []byte { return inoKey(epoch, 'U', ino) }

func updatePrefix(epoch uint32) []byte { return append(epochPrefix(epoch), 'U') }

func dentryPrefix(epoch uint32, parent Ino) []byte { return inoKey(epoch, 'd', parent) }

func dentryKey(epoch uint32, parent Ino, name string) []byte {
	return append(dentryPrefix(epoch, parent), name...)
}

func xattrPrefix(epoch uint32, ino Ino) []byte { return inoKey(epoch, 'x', ino) }

func xattrKey(epoch uint32, ino Ino, name string) []byte {
	return append(xattrPrefix(epoch, ino), name...)
}

func linkPrefix(epoch uint32, ino Ino) []byte { return inoKey(epoch, 'p', ino) }

func linkKey(epoch uint32, ino, parent Ino, name string) []byte {
	k := binary.BigEndian.AppendUint64(linkPrefix(epoch, ino), uint64(parent))
	return append(k, name...)
}

func dentryValue(child Ino, t Type) []byte {
	return append(binary.BigEndian.AppendUint64(nil, uint64(child)), byte(t))
}

func parseDentry(v []byte) (Ino, Type, bool) {
	if len(v) != 9 {
		return 0, 0, false
	}
	return Ino(binary.BigEndian.Uint64(v)), Type(v[8]), true
}

func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
