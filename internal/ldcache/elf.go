package ldcache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Library is what ldconfig learns from a shared object's ELF headers.
type Library struct {
	// SONAME is DT_SONAME, "" when the library has none.
	SONAME string
	// Flags are the cache flags ldconfig records for it: FlagELFLibc6 with
	// the architecture for x86-64 (0x0303), x32 (0x0803), AArch64
	// (0x0a03) and ppc64le (0x0503) libraries; for i386 libraries FlagELFLibc6 or FlagELFLibc5
	// when a DT_NEEDED (libc.so.6, libm.so.6; libc.so.5, libm.so.5) or the
	// interpreter says so, else FlagELF.
	Flags int32
	// AboveBaseline: an x86 object whose GNU property note says it needs
	// more than the x86-64 baseline ISA (x86-64-v2 or later). glibc 2.33
	// made ldconfig record that ISA level in the cache entry's hwcap
	// field (Debian 12's 2.36 records none), which the cache nctk writes
	// does not.
	AboveBaseline bool
}

// ErrNotLibrary: the file is not an ELF shared object ldconfig would put
// in the cache on this architecture (wrong magic, byte order, type or
// machine, no dynamic section).
var ErrNotLibrary = errors.New("not a shared library ldconfig would record")

// ELF constants used by Inspect.
const (
	elfClass32               = 1
	elfClass64               = 2
	elfDataLSB               = 1
	etDyn                    = 3
	emI386                   = 3
	emX8664                  = 62
	emPPC64                  = 21
	emAArch64                = 183
	ptLoad                   = 1
	ptDynamic                = 2
	ptInterp                 = 3
	ptNote                   = 4
	ptGNUProperty            = 0x6474e553
	ntGNUPropertyType0       = 5
	gnuPropertyX86ISA1Needed = 0xc0008002
	maxNoteBytes             = 4096
	ntGNUABITag              = 1
	dtNull                   = 0
	dtNeeded                 = 1
	dtStrtab                 = 5
	dtSoname                 = 14
	maxPhdrBytes             = 64 << 10
	maxDynBytes              = 1 << 20
	maxName                  = 4096
)

// elfObject is what the ELF header and program headers of a little-endian
// shared object (ET_DYN) say.
type elfObject struct {
	class   byte
	typ     uint16 // e_type: etDyn for a shared object
	machine uint16
	segs    []elfSegment
}

type elfSegment struct{ typ, off, vaddr, filesz uint64 }

// readSharedObject is readELF for a shared object (ET_DYN).
func readSharedObject(r io.ReaderAt, size int64) (elfObject, error) {
	o, err := readELF(r, size)
	if err == nil && o.typ != etDyn {
		return elfObject{}, fmt.Errorf("%w: ELF type %d, not ET_DYN", ErrNotLibrary, o.typ)
	}
	return o, err
}

// readELFHeader reads the ELF header of the object r of size bytes (the
// first 64 bytes, fewer for a small ELF32 object) and checks what every
// reader here needs: the magic, little-endian data and a known class with
// its whole header inside size.
func readELFHeader(r io.ReaderAt, size int64) (ident [64]byte, err error) {
	if size < 52 {
		return ident, fmt.Errorf("%w: %d bytes", ErrNotLibrary, size)
	}
	if _, err := r.ReadAt(ident[:min(int64(len(ident)), size)], 0); err != nil && err != io.EOF {
		return ident, fmt.Errorf("read ELF header: %w", err)
	}
	switch {
	case string(ident[:4]) != "\x7fELF":
		return ident, fmt.Errorf("%w: no ELF magic", ErrNotLibrary)
	case ident[5] != elfDataLSB:
		return ident, fmt.Errorf("%w: not little-endian", ErrNotLibrary)
	case ident[4] != elfClass32 && ident[4] != elfClass64:
		return ident, fmt.Errorf("%w: ELF class %d", ErrNotLibrary, ident[4])
	case ident[4] == elfClass64 && size < 64:
		return ident, fmt.Errorf("%w: truncated ELF64 header", ErrNotLibrary)
	}
	return ident, nil
}

// readELF reads the ELF header and the program headers of a little-endian
// ELF object of size bytes (of any type). Every offset is bounds-checked
// against size.
func readELF(r io.ReaderAt, size int64) (elfObject, error) {
	ident, err := readELFHeader(r, size)
	if err != nil {
		return elfObject{}, err
	}
	le := binary.LittleEndian
	o := elfObject{class: ident[4], typ: le.Uint16(ident[16:]), machine: le.Uint16(ident[18:])}
	var phoff, phentsize, phnum, phmin uint64
	if o.class == elfClass32 {
		phoff = uint64(le.Uint32(ident[28:]))
		phentsize, phnum, phmin = uint64(le.Uint16(ident[42:])), uint64(le.Uint16(ident[44:])), 32
	} else {
		phoff = le.Uint64(ident[32:])
		phentsize, phnum, phmin = uint64(le.Uint16(ident[54:])), uint64(le.Uint16(ident[56:])), 56
	}
	phBytes := phentsize * phnum
	if phentsize < phmin || phBytes > maxPhdrBytes || phoff > uint64(size) || phBytes > uint64(size)-phoff {
		return elfObject{}, fmt.Errorf("%w: bad program header table", ErrNotLibrary)
	}
	ph := make([]byte, phBytes)
	if _, err := r.ReadAt(ph, int64(phoff)); err != nil {
		return elfObject{}, fmt.Errorf("read program headers: %w", err)
	}
	o.segs = make([]elfSegment, 0, phnum)
	for i := range phnum {
		p := ph[i*phentsize:]
		if o.class == elfClass32 {
			o.segs = append(o.segs, elfSegment{uint64(le.Uint32(p)), uint64(le.Uint32(p[4:])), uint64(le.Uint32(p[8:])), uint64(le.Uint32(p[16:]))})
		} else {
			o.segs = append(o.segs, elfSegment{uint64(le.Uint32(p)), le.Uint64(p[8:]), le.Uint64(p[16:]), le.Uint64(p[32:])})
		}
	}
	return o, nil
}

// Inspect reads a shared object's SONAME and the cache flags ldconfig gives
// it, reading only the ELF header, the program headers, the dynamic section
// and the strings it names (a few small reads, whatever the file's size).
// size is the file's size, every offset is bounds-checked against it; a
// caller that does not know it may pass an upper bound (reads past the end
// of the file then fail with io.EOF).
func Inspect(r io.ReaderAt, size int64) (Library, error) {
	o, err := readSharedObject(r, size)
	if err != nil {
		return Library{}, err
	}
	le := binary.LittleEndian
	class, segs := o.class, o.segs
	var arch int32
	fixed := false // the type is fixed by the architecture (libc6)
	switch {
	case o.machine == emX8664 && class == elfClass64:
		arch, fixed = ArchX8664, true
	case o.machine == emX8664 && class == elfClass32:
		arch, fixed = ArchX32, true
	case o.machine == emI386 && class == elfClass32:
		arch = ArchI386
	case o.machine == emAArch64 && class == elfClass64:
		arch, fixed = ArchAArch64, true
	case o.machine == emPPC64 && class == elfClass64:
		arch, fixed = ArchPPC64, true
	default:
		return Library{}, fmt.Errorf("%w: ELF machine %d, class %d", ErrNotLibrary, o.machine, class)
	}
	inFile := func(off, n uint64) bool { return off <= uint64(size) && n <= uint64(size)-off }
	flags := int32(FlagELF)
	var dyn *elfSegment
	above := false
	for i := range segs {
		s := &segs[i]
		switch s.typ {
		case ptGNUProperty:
			if (o.machine == emX8664 || o.machine == emI386) && inFile(s.off, s.filesz) && s.filesz <= maxNoteBytes {
				b := make([]byte, s.filesz)
				if _, err := r.ReadAt(b, int64(s.off)); err == nil {
					above = above || isaAboveBaseline(b, class)
				}
			}
		case ptDynamic:
			if dyn == nil {
				dyn = s
			}
		case ptInterp:
			if !fixed && inFile(s.off, s.filesz) && s.filesz <= maxName {
				b := make([]byte, s.filesz)
				if _, err := r.ReadAt(b, int64(s.off)); err == nil {
					b, _, _ = bytes.Cut(b, []byte{0})
					switch string(b) {
					case "/lib/ld-linux.so.2":
						flags = FlagELFLibc6
					case "/lib/ld-linux.so.1":
						flags = FlagELFLibc5
					}
				}
			}
		}
	}
	if dyn == nil || dyn.filesz == 0 {
		return Library{}, fmt.Errorf("%w: no dynamic section", ErrNotLibrary)
	}
	if !inFile(dyn.off, dyn.filesz) || dyn.filesz > maxDynBytes {
		return Library{}, fmt.Errorf("%w: dynamic section outside the file", ErrNotLibrary)
	}
	db := make([]byte, dyn.filesz)
	if _, err := r.ReadAt(db, int64(dyn.off)); err != nil {
		return Library{}, fmt.Errorf("read dynamic section: %w", err)
	}
	entSize := uint64(16)
	if class == elfClass32 {
		entSize = 8
	}
	var strtab uint64
	haveStrtab := false
	var soname, needed []uint64
	for p := uint64(0); p+entSize <= uint64(len(db)); p += entSize {
		var tag, val uint64
		if class == elfClass32 {
			tag, val = uint64(int64(int32(le.Uint32(db[p:])))), uint64(le.Uint32(db[p+4:]))
		} else {
			tag, val = le.Uint64(db[p:]), le.Uint64(db[p+8:])
		}
		switch tag {
		case dtNull:
			p = uint64(len(db))
		case dtStrtab:
			strtab, haveStrtab = val, true
		case dtSoname:
			soname = append(soname, val)
		case dtNeeded:
			needed = append(needed, val)
		}
	}
	if !haveStrtab {
		if len(soname)+len(needed) > 0 {
			return Library{}, fmt.Errorf("%w: dynamic section without DT_STRTAB", ErrNotLibrary)
		}
		return Library{Flags: archFlags(arch, flags, fixed)}, nil
	}
	// DT_STRTAB is an address: find the file offset of the load segment
	// holding it.
	strOff, ok := uint64(0), false
	for _, s := range segs {
		if s.typ == ptLoad && strtab >= s.vaddr && strtab-s.vaddr < s.filesz {
			strOff, ok = s.off+(strtab-s.vaddr), true
			break
		}
	}
	if !ok {
		return Library{}, fmt.Errorf("%w: DT_STRTAB 0x%x outside the loaded segments", ErrNotLibrary, strtab)
	}
	str := func(o uint64) (string, error) {
		if o > uint64(size) || strOff > uint64(size)-o {
			return "", fmt.Errorf("%w: dynamic string offset %d outside the file", ErrNotLibrary, o)
		}
		return readCString(r, int64(strOff+o), size)
	}
	var lib Library
	if !fixed {
		for _, o := range needed {
			s, err := str(o)
			if err != nil {
				return Library{}, err
			}
			if f, ok := knownLib(s); ok {
				flags = f
				break
			}
		}
	}
	for _, o := range soname {
		s, err := str(o)
		if err != nil {
			return Library{}, err
		}
		lib.SONAME = s // ldconfig keeps the last DT_SONAME
	}
	lib.Flags = archFlags(arch, flags, fixed)
	lib.AboveBaseline = above
	return lib, nil
}

// isaAboveBaseline reports whether the GNU property notes b (a
// PT_GNU_PROPERTY segment of an object of ELF class class) hold an x86
// "ISA needed" property with more than the baseline bit.
func isaAboveBaseline(b []byte, class byte) bool {
	le := binary.LittleEndian
	align := uint64(8)
	if class == elfClass32 {
		align = 4
	}
	above := false
	eachNote(b, align, func(name []byte, typ uint32, desc []byte) bool {
		if typ != ntGNUPropertyType0 || string(name) != "GNU\x00" {
			return true
		}
		// Properties: type, size, data padded to the note's alignment.
		for len(desc) >= 8 {
			prType, prSize := le.Uint32(desc), uint64(le.Uint32(desc[4:]))
			if prSize > uint64(len(desc))-8 {
				break
			}
			if prType == gnuPropertyX86ISA1Needed && prSize >= 4 && le.Uint32(desc[8:])&^1 != 0 {
				above = true
				return false
			}
			next := (8 + prSize + align - 1) &^ (align - 1)
			if next > uint64(len(desc)) {
				break
			}
			desc = desc[next:]
		}
		return true
	})
	return above
}

func archFlags(arch, typ int32, fixed bool) int32 {
	if fixed {
		return arch | FlagELFLibc6
	}
	return arch | typ
}

// knownLib classifies a DT_NEEDED name as ldconfig does.
func knownLib(name string) (int32, bool) {
	switch name {
	case "libc.so.6", "libm.so.6":
		return FlagELFLibc6, true
	case "libc.so.5", "libm.so.5":
		return FlagELFLibc5, true
	}
	return 0, false
}

// readCString reads the NUL-terminated string at off (at most maxName
// bytes).
func readCString(r io.ReaderAt, off, size int64) (string, error) {
	buf := make([]byte, 0, 128)
	for len(buf) < maxName {
		chunk := min(int64(cap(buf)-len(buf)), size-off-int64(len(buf)))
		if chunk <= 0 {
			return "", fmt.Errorf("%w: unterminated dynamic string at %d", ErrNotLibrary, off)
		}
		n, err := r.ReadAt(buf[len(buf):len(buf)+int(chunk)], off+int64(len(buf)))
		if i := bytes.IndexByte(buf[len(buf):len(buf)+n], 0); i >= 0 {
			return string(buf[:len(buf)+i]), nil
		}
		buf = buf[:len(buf)+n]
		if err != nil && err != io.EOF {
			return "", fmt.Errorf("read dynamic string: %w", err)
		}
		if n == 0 {
			return "", fmt.Errorf("%w: unterminated dynamic string at %d", ErrNotLibrary, off)
		}
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
	}
	return "", fmt.Errorf("%w: dynamic string at %d longer than %d bytes", ErrNotLibrary, off, maxName)
}

// ABITag returns the kernel version of a shared object's GNU ABI note
// (NT_GNU_ABI_TAG, OS Linux) as major<<16 | minor<<8 | patch, 0 if it has
// none: the OSVersion older ldconfigs recorded in the cache (NVIDIA selects
// libnvidia-tls by it). size is the file's size.
func ABITag(r io.ReaderAt, size int64) (uint32, error) {
	o, err := readSharedObject(r, size)
	if err != nil {
		return 0, err
	}
	le := binary.LittleEndian
	var tag uint32
	err = o.eachNote(r, size, func(name []byte, typ uint32, d []byte) bool {
		if typ == ntGNUABITag && string(name) == "GNU\x00" && len(d) >= 16 && le.Uint32(d) == 0 { // ELF_NOTE_OS_LINUX
			tag = min(le.Uint32(d[4:]), 255)<<16 | min(le.Uint32(d[8:]), 255)<<8 | min(le.Uint32(d[12:]), 255)
			return false
		}
		return true
	})
	return tag, err
}

// FindNote returns the description of the first note of type typ named
// name (its NUL padding aside) in the PT_NOTE segments of the ELF object r
// of any type (an executable too); found is false when there is none.
// size is the file's size, or an upper bound of it.
func FindNote(r io.ReaderAt, size int64, name string, typ uint32) (desc []byte, found bool, err error) {
	o, err := readELF(r, size)
	if err != nil {
		return nil, false, err
	}
	err = o.eachNote(r, size, func(n []byte, t uint32, d []byte) bool {
		if t == typ && strings.TrimRight(string(n), "\x00") == name {
			desc, found = d, true
		}
		return !found
	})
	return desc, found, err
}

// eachNote calls f with each note of o's PT_NOTE segments (the first
// maxNoteBytes of each, read from r of size bytes) until f returns false.
func (o elfObject) eachNote(r io.ReaderAt, size int64, f func(name []byte, typ uint32, desc []byte) bool) error {
	more := true
	for _, s := range o.segs {
		if !more {
			break
		}
		if s.typ != ptNote || s.off > uint64(size) {
			continue
		}
		buf := make([]byte, min(s.filesz, uint64(size)-s.off, maxNoteBytes))
		got, err := r.ReadAt(buf, int64(s.off))
		if err != nil && !(err == io.EOF && got > 0) {
			return fmt.Errorf("read PT_NOTE at %d: %w", s.off, err)
		}
		eachNote(buf[:got], 4, func(name []byte, typ uint32, desc []byte) bool {
			more = f(name, typ, desc)
			return more
		})
	}
	return nil
}

// eachNote calls f with the name, type and description of each ELF note
// in b (namesz, descsz, type, the name padded to 4 bytes, the description
// padded to descAlign) until f returns false or the notes end or are
// malformed.
func eachNote(b []byte, descAlign uint64, f func(name []byte, typ uint32, desc []byte) bool) {
	le := binary.LittleEndian
	for len(b) >= 12 {
		namesz, descsz, typ := uint64(le.Uint32(b)), uint64(le.Uint32(b[4:])), le.Uint32(b[8:])
		nameEnd := 12 + align4(namesz)
		if nameEnd > uint64(len(b)) || descsz > uint64(len(b))-nameEnd {
			return
		}
		if !f(b[12:12+namesz], typ, b[nameEnd:nameEnd+descsz]) {
			return
		}
		next := nameEnd + (descsz+descAlign-1)&^(descAlign-1)
		if next > uint64(len(b)) {
			return
		}
		b = b[next:]
	}
}

func align4(n uint64) uint64 { return (n + 3) &^ 3 }

// ELF section-header constants used by FindSection.
const (
	shtStrtab     = 3
	shnXIndex     = 0xffff // e_shstrndx: the index is in section 0's sh_link
	shnLoReserve  = 0xff00 // the first value e_shnum and e_shstrndx cannot hold
	maxShdrBytes  = 4 << 20
	maxSectionTab = 1 << 20 // the section-name string table read
)

// Section is the header of an ELF section: its type (sh_type: 7 for
// SHT_NOTE), where its bytes lie in the file and its alignment.
type Section struct {
	Type      uint32
	Offset    uint64
	Size      uint64
	Addralign uint64
}

// FindSection returns the header of the first section named name in the
// little-endian ELF object r of size bytes (any type, either class); found
// is false when there is none. It reads the ELF header, the section header
// table and the section-name string table, each bounds-checked against
// size, and no section's contents: the caller reads what it needs, within
// the limit it sets.
func FindSection(r io.ReaderAt, size int64, name string) (s Section, found bool, err error) {
	ident, err := readELFHeader(r, size)
	if err != nil {
		return Section{}, false, err
	}
	le := binary.LittleEndian
	var shoff, shentsize, shnum, shstrndx, shmin uint64
	if ident[4] == elfClass32 {
		shoff = uint64(le.Uint32(ident[32:]))
		shentsize, shnum, shstrndx, shmin = uint64(le.Uint16(ident[46:])), uint64(le.Uint16(ident[48:])), uint64(le.Uint16(ident[50:])), 40
	} else {
		shoff = le.Uint64(ident[40:])
		shentsize, shnum, shstrndx, shmin = uint64(le.Uint16(ident[58:])), uint64(le.Uint16(ident[60:])), uint64(le.Uint16(ident[62:])), 64
	}
	if shoff == 0 {
		return Section{}, false, nil // no section header table
	}
	if shentsize < shmin || shoff > uint64(size) {
		return Section{}, false, fmt.Errorf("%w: bad section header table", ErrNotLibrary)
	}
	// header returns section i's header: name offset, type, offset, size,
	// link, alignment.
	header := func(b []byte) (nameOff, typ uint32, off, sz uint64, link uint32, align uint64) {
		if ident[4] == elfClass32 {
			return le.Uint32(b), le.Uint32(b[4:]), uint64(le.Uint32(b[16:])), uint64(le.Uint32(b[20:])), le.Uint32(b[24:]), uint64(le.Uint32(b[32:]))
		}
		return le.Uint32(b), le.Uint32(b[4:]), le.Uint64(b[24:]), le.Uint64(b[32:]), le.Uint32(b[40:]), le.Uint64(b[48:])
	}
	if shnum == 0 {
		// Extended numbering (0xff00 sections or more): section 0 holds
		// the count (sh_size) and, with e_shstrndx SHN_XINDEX, the name
		// table's index (sh_link). Values the header's 16 bits could have
		// held are refused there, as debug/elf refuses them.
		if shentsize > uint64(size)-shoff {
			return Section{}, false, fmt.Errorf("%w: bad section header table", ErrNotLibrary)
		}
		first := make([]byte, shentsize)
		if _, err := r.ReadAt(first, int64(shoff)); err != nil {
			return Section{}, false, fmt.Errorf("read section headers: %w", err)
		}
		_, _, _, n, link, _ := header(first)
		if shnum = n; shnum < shnLoReserve {
			return Section{}, false, fmt.Errorf("%w: bad extended section count %d", ErrNotLibrary, shnum)
		}
		if shstrndx == shnXIndex {
			if shstrndx = uint64(link); shstrndx < shnLoReserve {
				return Section{}, false, fmt.Errorf("%w: bad extended name table index %d", ErrNotLibrary, shstrndx)
			}
		}
	}
	tab := shentsize * shnum
	if shnum > maxShdrBytes/shentsize || tab > uint64(size)-shoff || shstrndx >= shnum {
		return Section{}, false, fmt.Errorf("%w: bad section header table", ErrNotLibrary)
	}
	sh := make([]byte, tab)
	if _, err := r.ReadAt(sh, int64(shoff)); err != nil {
		return Section{}, false, fmt.Errorf("read section headers: %w", err)
	}
	_, strType, strOff, strSize, _, _ := header(sh[shstrndx*shentsize:])
	if strType != shtStrtab {
		return Section{}, false, fmt.Errorf("%w: section-name table of type %d", ErrNotLibrary, strType)
	}
	if strOff > uint64(size) || strSize > uint64(size)-strOff {
		return Section{}, false, fmt.Errorf("%w: section-name table outside the file", ErrNotLibrary)
	}
	strs := make([]byte, min(strSize, maxSectionTab))
	if _, err := r.ReadAt(strs, int64(strOff)); err != nil {
		return Section{}, false, fmt.Errorf("read section names: %w", err)
	}
	for i := range shnum {
		nameOff, typ, off, sz, _, align := header(sh[i*shentsize:])
		if uint64(nameOff) >= uint64(len(strs)) {
			continue
		}
		n := strs[nameOff:]
		if end := bytes.IndexByte(n, 0); end >= 0 && string(n[:end]) == name {
			return Section{Type: typ, Offset: off, Size: sz, Addralign: align}, true, nil
		}
	}
	return Section{}, false, nil
}
