package hostfacts

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/atomicfile"
	"github.com/nctk/nctk/internal/ldcache"
)

// LibFacts are what ld.so.cache records about library files (their SONAME
// and flags, or that ldconfig skips them), keyed by file identity alone
// (device, inode, size, mtime, ctime: see Lib), and kept in the CDI
// cache directory for the hooks that add a spec's libraries to a
// container's ld.so.cache (nvidia-cdi-hook update-ldcache). Those are bind
// mounts of the same host files in every container, and a bind-mounted
// file has the identity of the host file: its ELF headers are read once
// per driver install instead of once per container. The same trust rules
// as the resolved-spec cache apply (a directory and a file owned by the
// effective user, no group or other permissions); an untrusted or broken
// file is no cache.
//
// The file is searched where it lies, not decoded: its entries are
// fixed-size records sorted by identity, looked up by binary search, so a
// process pays for the few files it asks about, not for every file the
// host ever had (a driver reinstalled without a reboot, a GPU Operator's
// driver container restarted: each is a new set of identities). Only Save,
// when something new was learnt, decodes the whole table.
//
// A nil *LibFacts is an empty table that learns nothing.
type LibFacts struct {
	dir   string
	table factsTable
	added map[fileID]Lib // learnt by this process
}

const (
	libFactsMagic   = "nctk-lib-facts\n"
	libFactsVersion = 2
	libFactsFile    = "lib-facts.bin"
	// maxLibFacts bounds the table: a host with more library files than
	// this starts a new one (what the current run learnt).
	maxLibFacts = 4096
	// libFactRecord is the size of one record: dev, ino, size, mtime,
	// ctime (8 bytes each), flags (4), the SONAME's offset in the string
	// area (4) and length (2), notLib (1), padding (1); little endian.
	libFactRecord = 52
)

// OpenLibFacts reads the table in cacheDir; "" (no cache) gives nil. An
// untrusted or malformed file is an empty table.
func OpenLibFacts(cacheDir string) *LibFacts {
	if cacheDir == "" {
		return nil
	}
	f := &LibFacts{dir: cacheDir}
	if data, ok := ReadTrusted(cacheDir, filepath.Join(cacheDir, libFactsFile), maxFile); ok {
		if t, err := parseLibFacts(data); err == nil {
			f.table = t
		}
	}
	return f
}

// Library returns what the table knows about the regular file st
// describes: found is false when it knows nothing; isLib is false for a
// file ldconfig skips.
func (f *LibFacts) Library(st *unix.Stat_t) (lib ldcache.Library, isLib, found bool) {
	if f == nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return ldcache.Library{}, false, false
	}
	id := idOf(st)
	l, ok := f.added[id]
	if !ok {
		l, ok = f.table.find(id)
	}
	if !ok {
		return ldcache.Library{}, false, false
	}
	return ldcache.Library{SONAME: l.SONAME, Flags: l.Flags}, !l.NotLib, true
}

// Learn records what inspecting the regular file st describes found.
func (f *LibFacts) Learn(st *unix.Stat_t, lib ldcache.Library, isLib bool) {
	if f == nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return
	}
	l := Lib{SONAME: lib.SONAME, Flags: lib.Flags, NotLib: !isLib}
	l.SetIdentity(st)
	if old, ok := f.table.find(l.id()); ok && old == l {
		return
	}
	if f.added == nil || len(f.added) >= maxLibFacts {
		f.added = map[fileID]Lib{}
	}
	f.added[l.id()] = l
}

// Save writes the table back when it learnt something (atomically, mode
// 0600, not synced: a lost file costs a few ELF reads). Hooks running at
// once may each write theirs; the last one stays, and what the others
// learnt is learnt again.
func (f *LibFacts) Save() error {
	if f == nil || len(f.added) == 0 {
		return nil
	}
	if err := CheckDir(f.dir, true); err != nil {
		return err
	}
	byID := map[fileID]Lib{}
	if old, err := f.table.all(); err == nil && len(old)+len(f.added) <= maxLibFacts {
		for _, l := range old {
			byID[l.id()] = l
		}
	}
	maps.Copy(byID, f.added)
	libs := slices.SortedFunc(maps.Values(byID), func(a, b Lib) int { return compareID(a.id(), b.id()) })
	data, err := encodeLibFacts(libs)
	if err != nil {
		return fmt.Errorf("write library facts: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(f.dir, libFactsFile), data, atomicfile.Options{Mode: 0o600}); err != nil {
		return fmt.Errorf("write library facts: %w", err)
	}
	t, err := parseLibFacts(data)
	if err != nil {
		return fmt.Errorf("write library facts: %w", err)
	}
	f.table, f.added = t, nil
	return nil
}

// compareID orders identities: device, inode, then size and times.
func compareID(a, b fileID) int {
	return cmp.Or(cmp.Compare(a.dev, b.dev), cmp.Compare(a.ino, b.ino), cmp.Compare(a.size, b.size),
		cmp.Compare(a.mtime, b.mtime), cmp.Compare(a.ctime, b.ctime))
}

// encodeLibFacts encodes libs, sorted by compareID without repeats: the
// header (magic, version, count, string area length as varints), the
// records, the string area.
func encodeLibFacts(libs []Lib) ([]byte, error) {
	var strs []byte
	recs := make([]byte, 0, len(libs)*libFactRecord)
	for _, l := range libs {
		if len(l.SONAME) > 1<<16-1 || len(strs) > 1<<32-1-len(l.SONAME) {
			return nil, fmt.Errorf("SONAME of %d bytes", len(l.SONAME))
		}
		le := binary.LittleEndian
		recs = le.AppendUint64(recs, l.Dev)
		recs = le.AppendUint64(recs, l.Ino)
		recs = le.AppendUint64(recs, uint64(l.Size))
		recs = le.AppendUint64(recs, uint64(l.Mtime))
		recs = le.AppendUint64(recs, uint64(l.Ctime))
		recs = le.AppendUint32(recs, uint32(l.Flags))
		recs = le.AppendUint32(recs, uint32(len(strs)))
		recs = le.AppendUint16(recs, uint16(len(l.SONAME)))
		notLib := byte(0)
		if l.NotLib {
			notLib = 1
		}
		recs = append(recs, notLib, 0)
		strs = append(strs, l.SONAME...)
	}
	b := append(make([]byte, 0, len(libFactsMagic)+16+len(recs)+len(strs)), libFactsMagic...)
	b = binary.AppendVarint(b, libFactsVersion)
	b = binary.AppendUvarint(b, uint64(len(libs)))
	b = binary.AppendUvarint(b, uint64(len(strs)))
	return append(append(b, recs...), strs...), nil
}

// errTruncated is the error for a header integer cut short or overlong.
var errTruncated = errors.New("library facts file: truncated or overlong integer")

// factsTable is an encoded table's records and string area, searched in
// place.
type factsTable struct {
	recs, strs []byte
}

func (t factsTable) len() int { return len(t.recs) / libFactRecord }

// parseLibFacts checks the header and the sizes of an encoded table; the
// records are checked as they are read (at).
func parseLibFacts(data []byte) (factsTable, error) {
	rest, ok := bytes.CutPrefix(data, []byte(libFactsMagic))
	if !ok {
		return factsTable{}, errors.New("not a library facts file")
	}
	v, k := binary.Varint(rest)
	if k <= 0 {
		return factsTable{}, errTruncated
	}
	if v != libFactsVersion {
		return factsTable{}, fmt.Errorf("library facts version %d, want %d", v, libFactsVersion)
	}
	rest = rest[k:]
	n, k := binary.Uvarint(rest)
	if k <= 0 {
		return factsTable{}, errTruncated
	}
	rest = rest[k:]
	strLen, k := binary.Uvarint(rest)
	if k <= 0 {
		return factsTable{}, errTruncated
	}
	rest = rest[k:]
	if n > maxLibFacts || strLen > uint64(len(rest)) || uint64(len(rest))-strLen != n*libFactRecord {
		return factsTable{}, fmt.Errorf("library facts file: %d records and %d bytes of names do not make %d bytes", n, strLen, len(rest))
	}
	recLen := int(n) * libFactRecord
	return factsTable{recs: rest[:recLen], strs: rest[recLen:]}, nil
}

// id is record i's identity.
func (t factsTable) id(i int) fileID {
	b, le := t.recs[i*libFactRecord:], binary.LittleEndian
	return fileID{le.Uint64(b), le.Uint64(b[8:]), int64(le.Uint64(b[16:])), int64(le.Uint64(b[24:])), int64(le.Uint64(b[32:]))}
}

// at decodes record i; a SONAME outside the string area or a flag byte
// that is neither 0 nor 1 is an error.
func (t factsTable) at(i int) (Lib, error) {
	b, le := t.recs[i*libFactRecord:(i+1)*libFactRecord], binary.LittleEndian
	id := t.id(i)
	off, n := uint64(le.Uint32(b[44:])), uint64(le.Uint16(b[48:]))
	if off+n > uint64(len(t.strs)) || b[50] > 1 || b[51] != 0 {
		return Lib{}, fmt.Errorf("library facts record %d is malformed", i)
	}
	return Lib{Dev: id.dev, Ino: id.ino, Size: id.size, Mtime: id.mtime, Ctime: id.ctime,
		Flags: int32(le.Uint32(b[40:])), SONAME: string(t.strs[off : off+n]), NotLib: b[50] == 1}, nil
}

// find looks id up by binary search (the records are sorted by compareID;
// a table that is not finds less, never another file's facts).
func (t factsTable) find(id fileID) (Lib, bool) {
	lo, hi := 0, t.len()
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if compareID(t.id(m), id) < 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == t.len() || t.id(lo) != id {
		return Lib{}, false
	}
	l, err := t.at(lo)
	return l, err == nil
}

// all decodes every record, in order.
func (t factsTable) all() ([]Lib, error) {
	libs := make([]Lib, t.len())
	for i := range libs {
		var err error
		if libs[i], err = t.at(i); err != nil {
			return nil, err
		}
	}
	return libs, nil
}
