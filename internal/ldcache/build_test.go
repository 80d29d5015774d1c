package ldcache

import "encoding/binary"

// Format selects the layout Build (a test helper) writes.
type Format int

// Layouts, as ldconfig's -c option names them.
const (
	// FormatNew is the glibc-ld.so.cache 1.1 layout only (ldconfig's default).
	FormatNew Format = iota
	// FormatCompat is an old ld.so-1.7.0 section followed by a new one.
	FormatCompat
	// FormatOld is the old ld.so-1.7.0 layout only (Parse rejects it).
	FormatOld
)

// Build returns a valid new-format cache holding entries in the given order,
// with each distinct string stored once. It is meant for tests, fuzz seeds
// and benchmarks; ldconfig's sorting is not applied.
func Build(entries []Entry) []byte { return BuildFormat(entries, FormatNew) }

// BuildFormat is Build with a choice of layout. The old section, when
// written, carries only flags, key and value.
func BuildFormat(entries []Entry, f Format) []byte {
	var st strtab
	st.init(2 * len(entries))
	for _, e := range entries {
		st.add(e.Key)
		st.add(e.Value)
	}
	strs, off := st.data, st.off

	le := binary.LittleEndian
	var out []byte
	oldLen, newStart := 0, 0
	if f != FormatNew {
		oldLen = oldHeaderSize + len(entries)*oldEntrySize
		if f == FormatCompat {
			newStart = int(alignUp(uint64(oldLen), newAlign))
		} else {
			newStart = oldLen
		}
	}
	newLen := 0
	if f != FormatOld {
		newLen = newHeaderSize + len(entries)*newEntrySize
	}
	strStart := newStart + newLen // file offset of the string table
	out = make([]byte, strStart, strStart+len(strs))

	if f != FormatNew {
		copy(out, oldMagic) // NUL and padding are already zero
		le.PutUint32(out[12:], uint32(len(entries)))
		// Old offsets are relative to the end of the old entry table.
		rel := uint32(strStart - oldLen)
		for i, e := range entries {
			p := out[oldHeaderSize+i*oldEntrySize:]
			le.PutUint32(p[0:], uint32(e.Flags))
			le.PutUint32(p[4:], rel+off[e.Key])
			le.PutUint32(p[8:], rel+off[e.Value])
		}
	}
	if f != FormatOld {
		h := out[newStart:]
		copy(h, newMagicFull)
		le.PutUint32(h[20:], uint32(len(entries)))
		le.PutUint32(h[24:], uint32(len(strs)))
		h[flagsOffset] = endianLittle
		// New offsets are relative to the new header.
		rel := uint32(newLen)
		for i, e := range entries {
			putNewEntry(h[newHeaderSize+i*newEntrySize:], e, rel, off)
		}
	}
	return append(out, strs...)
}

// IsSorted reports whether entries are in ldconfig's order.
func IsSorted(entries []Entry, hwcaps []string) bool {
	for i := 1; i < len(entries); i++ {
		if compareEntries(&entries[i-1], &entries[i], hwcaps) > 0 {
			return false
		}
	}
	return true
}
