package ldcache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Library is what ldconfig learns from a shared object's ELF headers.
type Library struct {
	// SONAME is DT_SONAME, "" when the library has none.
	SONAME string
	// Flags are the cache flags ldconfig records for it: FlagELFLibc6 with
	// the architecture for x86-64 (0x0303), x32 (0x0803) and AArch64
	// (0x0a03) libraries; for i386 libraries FlagELFLibc6 or FlagELFLibc5
	// when a DT_NEEDED (libc.so.6, libm.so.6; libc.so.5, libm.so.5) or the
	// interpreter says so, else FlagELF.
	Flags int32
}

// ErrNotLibrary: the file is not an ELF shared object ldconfig would put
// in the cache on this architecture (wrong magic, byte order, type or
// machine, no dynamic section).
var ErrNotLibrary = errors.New("not a shared library ldconfig would record")

// ELF constants used by Inspect.
const (
	elfClass32   = 1
	elfClass64   = 2
	elfDataLSB   = 1
	etDyn        = 3
	emI386       = 3
	emX8664      = 62
	emAArch64    = 183
	ptLoad       = 1
	ptDynamic    = 2
	ptInterp     = 3
	dtNull       = 0
	dtNeeded     = 1
	dtStrtab     = 5
	dtSoname     = 14
	maxPhdrBytes = 64 << 10
	maxDynBytes  = 1 << 20
	maxName      = 4096
)

// Inspect reads a shared object's SONAME and the cache flags ldconfig gives
// it, reading only the ELF header, the program headers, the dynamic section
// and the strings it names (a few small reads, whatever the file's size).
// size is the file's size. Every offset is bounds-checked against size.
func Inspect(r io.ReaderAt, size int64) (Library, error) {
	var ident [64]byte
	if size < 52 {
		return Library{}, fmt.Errorf("%w: %d bytes", ErrNotLibrary, size)
	}
	n := min(int64(len(ident)), size)
	if _, err := r.ReadAt(ident[:n], 0); err != nil && err != io.EOF {
		return Library{}, fmt.Errorf("read ELF header: %w", err)
	}
	if string(ident[:4]) != "\x7fELF" {
		return Library{}, fmt.Errorf("%w: no ELF magic", ErrNotLibrary)
	}
	if ident[5] != elfDataLSB {
		return Library{}, fmt.Errorf("%w: not little-endian", ErrNotLibrary)
	}
	le := binary.LittleEndian
	class := ident[4]
	var h struct {
		typ, machine            uint16
		phoff                   uint64
		phentsize, phnum, phmin uint64
	}
	h.typ, h.machine = le.Uint16(ident[16:]), le.Uint16(ident[18:])
	switch class {
	case elfClass32:
		h.phoff = uint64(le.Uint32(ident[28:]))
		h.phentsize, h.phnum, h.phmin = uint64(le.Uint16(ident[42:])), uint64(le.Uint16(ident[44:])), 32
	case elfClass64:
		if size < 64 {
			return Library{}, fmt.Errorf("%w: truncated ELF64 header", ErrNotLibrary)
		}
		h.phoff = le.Uint64(ident[32:])
		h.phentsize, h.phnum, h.phmin = uint64(le.Uint16(ident[54:])), uint64(le.Uint16(ident[56:])), 56
	default:
		return Library{}, fmt.Errorf("%w: ELF class %d", ErrNotLibrary, class)
	}
	if h.typ != etDyn {
		return Library{}, fmt.Errorf("%w: ELF type %d, not ET_DYN", ErrNotLibrary, h.typ)
	}
	var arch int32
	fixed := false // the type is fixed by the architecture (libc6)
	switch {
	case h.machine == emX8664 && class == elfClass64:
		arch, fixed = ArchX8664, true
	case h.machine == emX8664 && class == elfClass32:
		arch, fixed = ArchX32, true
	case h.machine == emI386 && class == elfClass32:
		arch = ArchI386
	case h.machine == emAArch64 && class == elfClass64:
		arch, fixed = ArchAArch64, true
	default:
		return Library{}, fmt.Errorf("%w: ELF machine %d, class %d", ErrNotLibrary, h.machine, class)
	}
	phBytes := h.phentsize * h.phnum
	if h.phentsize < h.phmin || phBytes > maxPhdrBytes || h.phoff > uint64(size) || phBytes > uint64(size)-h.phoff {
		return Library{}, fmt.Errorf("%w: bad program header table", ErrNotLibrary)
	}
	ph := make([]byte, phBytes)
	if _, err := r.ReadAt(ph, int64(h.phoff)); err != nil {
		return Library{}, fmt.Errorf("read program headers: %w", err)
	}
	type seg struct{ typ, off, vaddr, filesz uint64 }
	segs := make([]seg, 0, h.phnum)
	for i := range h.phnum {
		p := ph[i*h.phentsize:]
		if class == elfClass32 {
			segs = append(segs, seg{uint64(le.Uint32(p)), uint64(le.Uint32(p[4:])), uint64(le.Uint32(p[8:])), uint64(le.Uint32(p[16:]))})
		} else {
			segs = append(segs, seg{uint64(le.Uint32(p)), le.Uint64(p[8:]), le.Uint64(p[16:]), le.Uint64(p[32:])})
		}
	}
	inFile := func(off, n uint64) bool { return off <= uint64(size) && n <= uint64(size)-off }
	flags := int32(FlagELF)
	var dyn *seg
	for i := range segs {
		s := &segs[i]
		switch s.typ {
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
	return lib, nil
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
