package discover

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"syscall"
)

// ELF constants used by readSONAME.
const (
	elfClass32   = 1
	elfClass64   = 2
	elfDataLSB   = 1
	elfDataMSB   = 2
	elfTypeDyn   = 3
	ptLoad       = 1
	ptDynamic    = 2
	ptNote       = 4
	ntGNUABITag  = 1
	dtNull       = 0
	dtStrtab     = 5
	dtStrsz      = 10
	dtSoname     = 14
	maxPhnum     = 4096     // far above real objects (libcuda has ~10)
	maxDynamic   = 64 << 10 // bytes of .dynamic read at most
	maxSONAMELen = 4096
)

// errNotShared is returned for ELF files that are not shared objects.
var errNotShared = errors.New("not an ELF shared object (ET_DYN)")

// readSONAME returns the DT_SONAME of the ELF shared object at path ("" if
// it has none).
func readSONAME(path string) (string, error) { return readSONAMEBuf(path, nil) }

// readSONAMEBuf is readSONAME with a caller-owned head buffer (nil: a new
// one), so that discovery reads every library through one buffer.
func readSONAMEBuf(path string, buf *[4096]byte) (string, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0)
	if err != nil {
		return "", &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	if buf == nil {
		buf = new([4096]byte)
	}
	r := &headReader{fd: fd, head: buf}
	soname, err := sonameFrom(r)
	if err != nil {
		return "", fmt.Errorf("read ELF SONAME of %s: %w", path, err)
	}
	return soname, nil
}

// headReader is an io.ReaderAt over a file descriptor that reads the first
// 4 KiB once and serves reads inside it from memory: the ELF header and
// program headers (and for small objects everything) cost one pread. It
// bypasses os.File, whose poller registration costs system calls that a
// handful of reads from a regular file does not need.
type headReader struct {
	fd     int
	head   *[4096]byte
	n      int
	loaded bool
	err    error
}

func (r *headReader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("negative offset")
	}
	if !r.loaded {
		r.loaded = true
		n, err := syscall.Pread(r.fd, r.head[:], 0)
		if n < 0 {
			n = 0
		}
		r.n, r.err = n, err
	}
	if off+int64(len(p)) <= int64(r.n) {
		return copy(p, r.head[off:]), nil
	}
	if r.err == nil && r.n < len(r.head) && off >= int64(r.n) {
		return 0, io.EOF // the file is shorter than the head buffer
	}
	total := 0
	for total < len(p) {
		n, err := syscall.Pread(r.fd, p[total:], off+int64(total))
		if err != nil {
			return total, err
		}
		if n == 0 {
			return total, io.EOF
		}
		total += n
	}
	return total, nil
}

// elfHeaders is what the program headers of an ELF file say.
type elfHeaders struct {
	bo    binary.ByteOrder
	is64  bool
	loads []elfSeg
	dyn   *elfSeg
	notes []elfSeg
}

type elfSeg struct{ off, vaddr, filesz uint64 }

// readELFHeaders reads the ELF header and program headers of a shared
// object. Every offset is bounds-checked; bad input is an error.
func readELFHeaders(r io.ReaderAt) (*elfHeaders, error) {
	var ident [16]byte
	if _, err := r.ReadAt(ident[:], 0); err != nil {
		return nil, fmt.Errorf("read ELF ident: %w", err)
	}
	if string(ident[:4]) != "\x7fELF" {
		return nil, errors.New("not an ELF file")
	}
	h := &elfHeaders{}
	switch ident[5] {
	case elfDataLSB:
		h.bo = binary.LittleEndian
	case elfDataMSB:
		h.bo = binary.BigEndian
	default:
		return nil, fmt.Errorf("bad ELF data encoding %d", ident[5])
	}
	switch ident[4] {
	case elfClass32:
	case elfClass64:
		h.is64 = true
	default:
		return nil, fmt.Errorf("bad ELF class %d", ident[4])
	}
	bo, is64 := h.bo, h.is64

	// ELF header fields after e_ident.
	hdrSize := 52
	if is64 {
		hdrSize = 64
	}
	hdr := make([]byte, hdrSize)
	if _, err := r.ReadAt(hdr, 0); err != nil {
		return nil, fmt.Errorf("read ELF header: %w", err)
	}
	if bo.Uint16(hdr[16:]) != elfTypeDyn {
		return nil, errNotShared
	}
	var phoff uint64
	var phentsize, phnum uint16
	if is64 {
		phoff = bo.Uint64(hdr[32:])
		phentsize, phnum = bo.Uint16(hdr[54:]), bo.Uint16(hdr[56:])
	} else {
		phoff = uint64(bo.Uint32(hdr[28:]))
		phentsize, phnum = bo.Uint16(hdr[42:]), bo.Uint16(hdr[44:])
	}
	minEnt := uint16(32)
	if is64 {
		minEnt = 56
	}
	if phnum == 0 || phnum > maxPhnum || phentsize < minEnt || phentsize > 4*minEnt {
		return nil, fmt.Errorf("bad program header table (%d entries of %d bytes)", phnum, phentsize)
	}
	ph := make([]byte, int(phnum)*int(phentsize))
	if _, err := r.ReadAt(ph, int64(min(phoff, 1<<62))); err != nil {
		return nil, fmt.Errorf("read program headers at %d: %w", phoff, err)
	}
	for i := 0; i < int(phnum); i++ {
		p := ph[i*int(phentsize):]
		var s elfSeg
		typ := bo.Uint32(p[0:])
		if is64 {
			s = elfSeg{off: bo.Uint64(p[8:]), vaddr: bo.Uint64(p[16:]), filesz: bo.Uint64(p[32:])}
		} else {
			s = elfSeg{off: uint64(bo.Uint32(p[4:])), vaddr: uint64(bo.Uint32(p[8:])), filesz: uint64(bo.Uint32(p[16:]))}
		}
		switch typ {
		case ptLoad:
			h.loads = append(h.loads, s)
		case ptDynamic:
			if h.dyn == nil {
				d := s
				h.dyn = &d
			}
		case ptNote:
			h.notes = append(h.notes, s)
		}
	}
	return h, nil
}

// sonameFrom reads the DT_SONAME of an ELF shared object with a handful of
// small reads: the ELF header, the program headers, the PT_DYNAMIC segment
// and the name itself from the dynamic string table (located through the
// PT_LOAD segment that maps DT_STRTAB). Section headers and the whole
// string table are never read, which keeps this cheap for large libraries
// such as libcuda. Every offset is bounds-checked; bad input is an error.
func sonameFrom(r io.ReaderAt) (string, error) {
	h, err := readELFHeaders(r)
	if err != nil {
		return "", err
	}
	bo, is64, loads, dyn := h.bo, h.is64, h.loads, h.dyn
	if dyn == nil {
		return "", errors.New("no PT_DYNAMIC segment")
	}
	size := min(dyn.filesz, maxDynamic)
	dbuf := make([]byte, size)
	n, err := r.ReadAt(dbuf, int64(min(dyn.off, 1<<62)))
	if err != nil && !(errors.Is(err, io.EOF) && n > 0) {
		return "", fmt.Errorf("read PT_DYNAMIC at %d: %w", dyn.off, err)
	}
	dbuf = dbuf[:n]

	entSize := 8
	if is64 {
		entSize = 16
	}
	var strtab, strsz, soname uint64
	haveStrtab, haveSoname := false, false
	for p := 0; p+entSize <= len(dbuf); p += entSize {
		var tag, val uint64
		if is64 {
			tag, val = bo.Uint64(dbuf[p:]), bo.Uint64(dbuf[p+8:])
		} else {
			tag, val = uint64(bo.Uint32(dbuf[p:])), uint64(bo.Uint32(dbuf[p+4:]))
		}
		if tag == dtNull {
			break
		}
		switch tag {
		case dtStrtab:
			strtab, haveStrtab = val, true
		case dtStrsz:
			strsz = val
		case dtSoname:
			soname, haveSoname = val, true
		}
	}
	if !haveSoname {
		return "", nil
	}
	if !haveStrtab {
		return "", errors.New("DT_SONAME without DT_STRTAB")
	}
	if strsz != 0 && soname >= strsz {
		return "", fmt.Errorf("DT_SONAME offset %d outside the string table (%d bytes)", soname, strsz)
	}
	// DT_STRTAB is a virtual address; find the file offset through the
	// PT_LOAD segment that contains it.
	var fileOff uint64
	found := false
	for _, l := range loads {
		if strtab >= l.vaddr && strtab-l.vaddr < l.filesz {
			rel := strtab - l.vaddr
			if soname >= l.filesz-rel {
				return "", fmt.Errorf("DT_SONAME offset %d runs past its segment", soname)
			}
			fileOff, found = l.off+rel+soname, true
			break
		}
	}
	if !found {
		return "", fmt.Errorf("DT_STRTAB address %#x is not in a PT_LOAD segment", strtab)
	}
	var name []byte
	buf := make([]byte, 256)
	for len(name) < maxSONAMELen {
		n, err := r.ReadAt(buf, int64(min(fileOff+uint64(len(name)), 1<<62)))
		for _, c := range buf[:n] {
			if c == 0 {
				return string(name), nil
			}
			name = append(name, c)
		}
		if err != nil {
			return "", fmt.Errorf("read SONAME at %d: no terminating NUL: %w", fileOff, err)
		}
	}
	return "", fmt.Errorf("SONAME at %d longer than %d bytes", fileOff, maxSONAMELen)
}

// abiTagFrom returns the kernel version of an ELF object's GNU ABI note
// (NT_GNU_ABI_TAG, OS Linux) as major<<16 | minor<<8 | patch, 0 if it has
// none. NVIDIA selects libnvidia-tls by it (the new TLS ABI is 2.3.99).
func abiTagFrom(r io.ReaderAt) (uint32, error) {
	h, err := readELFHeaders(r)
	if err != nil {
		return 0, err
	}
	for _, n := range h.notes {
		size := min(n.filesz, 4096)
		buf := make([]byte, size)
		got, err := r.ReadAt(buf, int64(min(n.off, 1<<62)))
		if err != nil && !(errors.Is(err, io.EOF) && got > 0) {
			return 0, fmt.Errorf("read PT_NOTE at %d: %w", n.off, err)
		}
		buf = buf[:got]
		// Notes: namesz, descsz, type, name (padded to 4), desc (padded to 4).
		for len(buf) >= 12 {
			namesz, descsz, typ := h.bo.Uint32(buf[0:]), h.bo.Uint32(buf[4:]), h.bo.Uint32(buf[8:])
			nameEnd := 12 + align4(uint64(namesz))
			descEnd := nameEnd + align4(uint64(descsz))
			if descEnd > uint64(len(buf)) {
				break
			}
			name := buf[12 : 12+uint64(namesz)]
			if typ == ntGNUABITag && string(name) == "GNU\x00" && descsz >= 16 {
				d := buf[nameEnd:]
				if h.bo.Uint32(d[0:]) == 0 { // ELF_NOTE_OS_LINUX
					return min(h.bo.Uint32(d[4:]), 255)<<16 | min(h.bo.Uint32(d[8:]), 255)<<8 | min(h.bo.Uint32(d[12:]), 255), nil
				}
			}
			buf = buf[descEnd:]
		}
	}
	return 0, nil
}

func align4(n uint64) uint64 { return (n + 3) &^ 3 }

// readABITag is abiTagFrom for a file.
func readABITag(path string) (uint32, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC|syscall.O_NONBLOCK, 0)
	if err != nil {
		return 0, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	v, err := abiTagFrom(&headReader{fd: fd, head: new([4096]byte)})
	if err != nil {
		return 0, fmt.Errorf("read ELF ABI note of %s: %w", path, err)
	}
	return v, nil
}
