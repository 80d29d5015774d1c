// Package ldcache reads glibc's ld.so.cache, the index the dynamic loader uses
// to map library names (SONAMEs and link names) to files, without running
// ldconfig.
//
// Supported layouts:
//
//   - the new format: magic "glibc-ld.so.cache" version "1.1", a 48-byte
//     header, 24-byte entries and a string table (what glibc ≥ 2.32 writes by
//     default, and what Debian 12's ldconfig writes);
//   - the compat layout: an old "ld.so-1.7.0" section (16-byte header,
//     12-byte entries and its strings) followed, at the next 8-byte boundary,
//     by a new-format section. The old section is skipped.
//
// A cache with only the old section is rejected as an unsupported format.
// The glibc ≥ 2.33 header fields (endianness flags and the offset of the
// hwcaps extension) are honoured where they matter and otherwise ignored.
//
// Every offset read from the file is bounds-checked: a damaged or hostile
// cache yields an error naming what is wrong, never a panic or an
// out-of-range read. Multi-byte fields are little-endian, the byte order of
// every architecture the toolkit supports (x86_64, aarch64, ppc64le).
package ldcache

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"unsafe"

	"github.com/nctk/nctk/internal/hostfile"
)

// On-disk layout constants.
const (
	oldMagic       = "ld.so-1.7.0"
	oldHeaderSize  = 16 // magic (11 bytes + NUL) + nlibs u32
	oldEntrySize   = 12 // flags i32, key u32, value u32
	newMagic       = "glibc-ld.so.cache"
	newVersion     = "1.1"
	newMagicFull   = newMagic + newVersion
	newHeaderSize  = 48 // magic+version 20, nlibs, len_strings, flags u8 + 3 pad, extension offset, 3 unused
	newEntrySize   = 24 // flags i32, key u32, value u32, osversion u32, hwcap u64
	newAlign       = 8  // the new section starts 8-byte aligned after an old one
	flagsOffset    = 28 // glibc ≥ 2.33: u8 endianness flags
	extOffsetField = 32 // glibc ≥ 2.33: u32 extension offset
)

// Entry flag bits (glibc's FLAG_* values from ldconfig).
const (
	// FlagTypeMask selects the library type in Flags.
	FlagTypeMask = 0x00ff
	// FlagELF marks an ELF library of unknown C library.
	FlagELF = 0x0001
	// FlagELFLibc5 marks a libc5 ELF library (obsolete; the loader ignores these).
	FlagELFLibc5 = 0x0002
	// FlagELFLibc6 marks a glibc ELF library.
	FlagELFLibc6 = 0x0003
	// FlagArchMask selects the architecture/ABI in Flags.
	FlagArchMask = 0xff00

	// Architecture/ABI values (Flags & FlagArchMask).
	ArchI386       = 0x0000 // also i386-less 32-bit on other arches, and libc4/libc5 entries
	ArchSPARC64    = 0x0100
	ArchIA64       = 0x0200
	ArchX8664      = 0x0300
	ArchS390x      = 0x0400
	ArchPPC64      = 0x0500
	ArchMIPS64N32  = 0x0600
	ArchMIPS64N64  = 0x0700
	ArchX32        = 0x0800
	ArchARMHF      = 0x0900
	ArchAArch64    = 0x0a00
	ArchARMSF      = 0x0b00
	ArchRISCVSoft  = 0x0f00
	ArchRISCVDbl   = 0x1000
	ArchLoongSoft  = 0x1100
	ArchLoongDbl   = 0x1200
	hwcapExtension = uint64(1) << 62 // glibc ≥ 2.33: entry belongs to a glibc-hwcaps subdirectory
)

// Endianness values of the glibc ≥ 2.33 header flags byte.
const (
	endianUnset  = 0
	endianMask   = 3
	endianLittle = 2
)

// Class is the word size an entry's architecture flag names, as the NVIDIA
// tools use it to pick 64-bit libraries and their 32-bit compat counterparts.
type Class int

// Classes.
const (
	// ClassOther is any architecture flag that is neither of the below
	// (x32, s390x, MIPS, RISC-V, …).
	ClassOther Class = iota
	// Class64 is x86-64 (0x0300), aarch64 (0x0a00) and ppc64le (0x0500).
	Class64
	// Class32 is i386 (0x0000) and armhf (0x0900).
	Class32
)

// String returns "64-bit", "32-bit" or "other".
func (c Class) String() string {
	switch c {
	case Class64:
		return "64-bit"
	case Class32:
		return "32-bit"
	default:
		return "other"
	}
}

// Entry is one library in the cache.
type Entry struct {
	// Key is the name the loader looks up (a SONAME such as libcuda.so.1, or
	// a link name such as libcuda.so).
	Key string
	// Value is the path of the file (usually a symlink) it maps to.
	Value string
	// Flags holds the library type (FlagTypeMask) and architecture
	// (FlagArchMask).
	Flags int32
	// OSVersion is the minimum kernel version from the ELF ABI note, 0 if none.
	OSVersion uint32
	// HWCap is the legacy hardware-capability mask, or with bit 62 set the
	// index of a glibc-hwcaps subdirectory.
	HWCap uint64
}

// IsELF reports whether the entry is an ELF library the loader would use:
// type FlagELF or FlagELFLibc6 (the same test as glibc's loader, and
// equivalent to NVIDIA's "flags & 1" for every type ldconfig writes).
func (e Entry) IsELF() bool {
	t := e.Flags & FlagTypeMask
	return t == FlagELF || t == FlagELFLibc6
}

// Arch returns the architecture/ABI bits (Flags & FlagArchMask).
func (e Entry) Arch() uint32 { return uint32(e.Flags) & FlagArchMask }

// Class classifies the entry's architecture flag.
func (e Entry) Class() Class {
	switch e.Arch() {
	case ArchX8664, ArchAArch64, ArchPPC64:
		return Class64
	case ArchI386, ArchARMHF:
		return Class32
	default:
		return ClassOther
	}
}

// HWCapsSubdir reports whether the entry describes a library in a
// glibc-hwcaps subdirectory (glibc ≥ 2.33).
func (e Entry) HWCapsSubdir() bool { return e.HWCap&hwcapExtension != 0 }

// Cache is a parsed ld.so.cache.
type Cache struct {
	// Entries are the new-format entries in file order (ldconfig sorts them
	// so that the preferred library for a key comes first).
	Entries []Entry
	// HWCaps are the glibc-hwcaps subdirectory names of the cache's
	// extension (glibc ≥ 2.33), in section order: an entry with
	// HWCapsSubdir belongs to HWCaps[uint32(HWCap)]. Nil when the cache has
	// no such section (or an extension the loader would not use).
	HWCaps []string
}

// Errors returned (wrapped, with details) by Parse and Load; test with
// errors.Is.
var (
	// ErrBadMagic: the data does not start with either cache magic.
	ErrBadMagic = errors.New("bad magic")
	// ErrUnsupported: only the old ld.so-1.7.0 section is present, or the
	// new section declares another version or byte order.
	ErrUnsupported = errors.New("unsupported format")
	// ErrTruncated: a header or the entry table or string table runs past
	// the end of the data.
	ErrTruncated = errors.New("truncated")
	// ErrOutOfRange: an entry's key or value offset points outside the
	// string table, or its string is not NUL-terminated inside it.
	ErrOutOfRange = errors.New("string offset out of range")
)

// Parse parses an ld.so.cache image. The returned strings do not alias data.
func Parse(data []byte) (*Cache, error) {
	newOff, err := locateNew(data)
	if err != nil {
		return nil, err
	}
	// One allocation for every string in the cache: the entries' keys and
	// values are substrings of this copy of the new section.
	c, _, err := parseNew(string(data[newOff:]), newOff, nil)
	return c, err
}

// MaxSize bounds the cache files ReadFiltered accepts (a cache with 100,000
// entries takes about 10 MiB). A larger file is refused from its size,
// before anything is read.
const MaxSize = hostfile.MaxLdCache

// ErrTooLarge: the file is larger than MaxSize.
var ErrTooLarge = hostfile.ErrTooLarge

// ReadFiltered reads a cache from r (for example a file opened inside a
// container or driver root; an *os.File must be a regular file) and parses
// it, keeping only the entries whose key keep accepts (every entry with a
// nil keep). Every entry is checked whatever keep says, so a damaged cache
// fails as with Parse; total is the number of entries in the file. A
// caller that looks up a few names in a host's cache of thousands of
// libraries (discovery) holds those alone.
func ReadFiltered(r io.Reader, keep func(key string) bool) (c *Cache, total int, err error) {
	data, err := readCache(r)
	if err != nil {
		return nil, 0, err
	}
	return parseOwned(data, keep)
}

// readCache reads a cache file: a regular file of at most MaxSize bytes.
func readCache(r io.Reader) ([]byte, error) {
	hint := 0
	if f, ok := r.(*os.File); ok {
		st, err := f.Stat()
		if err != nil {
			return nil, err
		}
		if !st.Mode().IsRegular() {
			return nil, fmt.Errorf("not a regular file (%v)", st.Mode().Type())
		}
		if st.Size() > MaxSize {
			return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, st.Size(), MaxSize)
		}
		hint = int(st.Size())
	}
	return readLimited(r, hint, MaxSize)
}

// readLimited reads r to EOF into a buffer sized for hint bytes, failing
// beyond limit bytes.
func readLimited(r io.Reader, hint, limit int) ([]byte, error) {
	buf := make([]byte, 0, max(hint+1, 512)) // +1: EOF is seen without growing
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, len(buf)) // doubles
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if len(buf) > limit {
			return nil, fmt.Errorf("%w: over %d bytes", ErrTooLarge, limit)
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// parseOwned parses data that nothing else references or will modify; the
// entries' strings alias it instead of a copy.
func parseOwned(data []byte, keep func(string) bool) (*Cache, int, error) {
	newOff, err := locateNew(data)
	if err != nil {
		return nil, 0, err
	}
	sec := data[newOff:]
	if len(sec) == 0 {
		return parseNew("", newOff, keep)
	}
	// data is never written again (it is owned by this call chain), so a
	// string header over it is immutable for its whole lifetime.
	return parseNew(unsafe.String(&sec[0], len(sec)), newOff, keep)
}

// locateNew returns the file offset of the new-format header, skipping an
// old-format section if there is one.
func locateNew(data []byte) (int, error) {
	switch {
	case hasPrefix(data, newMagic):
		return 0, nil
	case hasPrefix(data, oldMagic):
	default:
		n := min(len(data), len(newMagicFull))
		return 0, fmt.Errorf("%w: file starts with %q, want %q or %q", ErrBadMagic, data[:n], newMagic, oldMagic)
	}
	if len(data) < oldHeaderSize {
		return 0, fmt.Errorf("%w: old-format header needs %d bytes, file has %d", ErrTruncated, oldHeaderSize, len(data))
	}
	nOld := uint64(binary.LittleEndian.Uint32(data[12:16]))
	end := uint64(oldHeaderSize) + nOld*oldEntrySize
	if end > uint64(len(data)) {
		return 0, fmt.Errorf("%w: old-format entry table (%d entries) ends at byte %d, beyond end of file (%d bytes)",
			ErrTruncated, nOld, end, len(data))
	}
	// The new header follows the old entries at the next 8-byte boundary
	// (the strings both sections share come after the new entries), which
	// is exactly where glibc's loader looks for it.
	off := alignUp(end, newAlign)
	if off > uint64(len(data)) || !hasPrefix(data[off:], newMagic) {
		return 0, fmt.Errorf("%w: %s cache without a %s section at offset %d", ErrUnsupported, oldMagic, newMagic, off)
	}
	return int(off), nil
}

// parseNew parses the new-format section sec, which starts at file offset
// base (used in error messages only), keeping the entries whose key keep
// accepts (every entry when keep is nil); it also returns the number of
// entries in the section.
func parseNew(sec string, base int, keep func(string) bool) (*Cache, int, error) {
	if len(sec) < newHeaderSize {
		return nil, 0, fmt.Errorf("%w: %s header at offset %d needs %d bytes, %d left", ErrTruncated, newMagic, base, newHeaderSize, len(sec))
	}
	if v := sec[len(newMagic):len(newMagicFull)]; v != newVersion {
		return nil, 0, fmt.Errorf("%w: %s version %q, want %q", ErrUnsupported, newMagic, v, newVersion)
	}
	if f := sec[flagsOffset]; f != endianUnset && f&endianMask != endianLittle {
		return nil, 0, fmt.Errorf("%w: header flags 0x%02x: not a little-endian cache", ErrUnsupported, f)
	}
	nlibs := uint64(le32(sec, 20))
	lenStrings := uint64(le32(sec, 24))
	strStart := uint64(newHeaderSize) + nlibs*newEntrySize
	if strStart > uint64(len(sec)) {
		return nil, 0, fmt.Errorf("%w: entry table (%d entries) ends at byte %d, beyond end of file (%d bytes)",
			ErrTruncated, nlibs, uint64(base)+strStart, base+len(sec))
	}
	strEnd := strStart + lenStrings
	if strEnd > uint64(len(sec)) {
		return nil, 0, fmt.Errorf("%w: string table (%d bytes at offset %d) ends beyond end of file (%d bytes)",
			ErrTruncated, lenStrings, uint64(base)+strStart, base+len(sec))
	}
	// Offsets are relative to the new header; every string must lie in the
	// string table and end with a NUL inside it.
	strs := sec[:strEnd]
	var entries []Entry
	if keep == nil {
		entries = make([]Entry, 0, nlibs)
	}
	for i := range int(nlibs) {
		p := newHeaderSize + i*newEntrySize
		keyOff, valOff := le32(sec, p+4), le32(sec, p+8)
		key, ok := cstring(strs, strStart, keyOff)
		if !ok {
			return nil, 0, fmt.Errorf("%w: entry %d: key offset %d outside string table [%d,%d) or not NUL-terminated",
				ErrOutOfRange, i, keyOff, strStart, strEnd)
		}
		val, ok := cstring(strs, strStart, valOff)
		if !ok {
			return nil, 0, fmt.Errorf("%w: entry %d (%s): value offset %d outside string table [%d,%d) or not NUL-terminated",
				ErrOutOfRange, i, key, valOff, strStart, strEnd)
		}
		if keep != nil && !keep(key) {
			continue
		}
		entries = append(entries, Entry{
			Key:       key,
			Value:     val,
			Flags:     int32(le32(sec, p)),
			OSVersion: le32(sec, p+12),
			HWCap:     uint64(le32(sec, p+16)) | uint64(le32(sec, p+20))<<32,
		})
	}
	return &Cache{Entries: entries, HWCaps: parseHWCaps(sec, base, strStart, strEnd)}, int(nlibs), nil
}

// Extension directory constants (glibc ≥ 2.33).
const (
	extMagic       = 0xeaa42174 // cache_extension_magic
	extHeaderSize  = 8          // magic, count
	extSectionSize = 16         // tag, flags, offset, size
	extTagGen      = 0          // generator string
	extTagHWCaps   = 1          // glibc-hwcaps subdirectory names
)

// parseHWCaps returns the glibc-hwcaps names of the new-format section sec
// (at file offset base; strings in [strStart, strEnd) of sec), or nil when
// there are none or the extension is one the loader would ignore. It is best
// effort: a damaged extension is not an error, as the loader then only
// skips the glibc-hwcaps entries.
func parseHWCaps(sec string, base int, strStart, strEnd uint64) []string {
	extOff := uint64(le32(sec, extOffsetField))
	if extOff == 0 || extOff%4 != 0 || extOff < uint64(base) {
		return nil
	}
	rel := extOff - uint64(base) // offsets in the directory are file offsets
	if rel+extHeaderSize > uint64(len(sec)) || le32(sec, int(rel)) != extMagic {
		return nil
	}
	n := uint64(le32(sec, int(rel)+4))
	if rel+extHeaderSize+n*extSectionSize > uint64(len(sec)) {
		return nil
	}
	for i := range n {
		p := int(rel + extHeaderSize + i*extSectionSize)
		tag, off, size := le32(sec, p), uint64(le32(sec, p+8)), uint64(le32(sec, p+12))
		if tag != extTagHWCaps {
			continue
		}
		if off < uint64(base) || off%4 != 0 || size == 0 || size%4 != 0 || off-uint64(base)+size > uint64(len(sec)) {
			return nil
		}
		names := make([]string, 0, size/4)
		strs := sec[:strEnd]
		for q := off - uint64(base); q < off-uint64(base)+size; q += 4 {
			s, ok := cstring(strs, strStart, le32(sec, int(q)))
			if !ok {
				return nil
			}
			names = append(names, s)
		}
		return names
	}
	return nil
}

// HostArch returns the architecture flag of class on the architecture this
// program runs on (GOARCH): amd64 64-bit x86-64, 32-bit i386; arm64 64-bit
// AArch64, 32-bit armhf; ppc64le 64-bit only. ok is false where there is
// none.
func HostArch(class Class) (arch uint32, ok bool) { return archFor(runtime.GOARCH, class) }

func archFor(goarch string, class Class) (uint32, bool) {
	switch {
	case goarch == "amd64" && class == Class64:
		return ArchX8664, true
	case goarch == "amd64" && class == Class32:
		return ArchI386, true
	case goarch == "arm64" && class == Class64:
		return ArchAArch64, true
	case goarch == "arm64" && class == Class32:
		return ArchARMHF, true
	case goarch == "ppc64le" && class == Class64:
		return ArchPPC64, true
	}
	return 0, false
}

// cstring returns the NUL-terminated string at off in s, which must lie in
// [lo, len(s)).
func cstring(s string, lo uint64, off uint32) (string, bool) {
	o := uint64(off)
	if o < lo || o >= uint64(len(s)) {
		return "", false
	}
	n := strings.IndexByte(s[o:], 0)
	if n < 0 {
		return "", false
	}
	return s[o : o+uint64(n)], true
}

func le32(s string, p int) uint32 {
	_ = s[p+3]
	return uint32(s[p]) | uint32(s[p+1])<<8 | uint32(s[p+2])<<16 | uint32(s[p+3])<<24
}

func hasPrefix(b []byte, p string) bool {
	return len(b) >= len(p) && string(b[:len(p)]) == p
}

func alignUp(n, a uint64) uint64 { return (n + a - 1) &^ (a - 1) }
