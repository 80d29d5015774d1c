package ldcache

import (
	"cmp"
	"math/bits"
	"runtime"
	"slices"
	"strings"
)

// LibCmp compares two library names the way glibc's _dl_cache_libcmp does,
// which is the order the loader's binary search over the cache assumes:
// runs of decimal digits compare by their numeric value (libfoo.so.9 <
// libfoo.so.10), a digit sorts after any other byte, and other bytes compare
// by value (as C's char: signed on x86, unsigned elsewhere). Numeric runs
// wrap at 32 bits as glibc's int arithmetic does; their difference does not
// (see below). The result is negative, zero or positive.
func LibCmp(a, b string) int {
	signed := charIsSigned(runtime.GOARCH)
	i, j := 0, 0
	for i < len(a) {
		ca := a[i]
		var cb byte
		if j < len(b) {
			cb = b[j]
		}
		switch {
		case isDigit(ca) && isDigit(cb):
			var va, vb int32
			for i < len(a) && isDigit(a[i]) {
				va = va*10 + int32(a[i]-'0')
				i++
			}
			for j < len(b) && isDigit(b[j]) {
				vb = vb*10 + int32(b[j]-'0')
				j++
			}
			// glibc returns val1 - val2 as an int, which overflows for
			// values 2^31 or more apart (numbers of ten digits and more,
			// which no library has): the comparison is then not an order
			// at all and no sort can satisfy it. The difference is taken
			// without overflow, an order on the wrapped values, the same
			// as glibc's for every number below 2^30.
			if d := int64(va) - int64(vb); d != 0 {
				return int(d)
			}
		case isDigit(ca):
			return 1
		case isDigit(cb):
			return -1
		case ca != cb:
			return charVal(ca, signed) - charVal(cb, signed)
		default:
			i++
			j++
		}
	}
	if j < len(b) {
		return -charVal(b[j], signed)
	}
	return 0
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// charIsSigned reports whether C's plain char is signed on goarch (glibc
// compares names as char).
func charIsSigned(goarch string) bool {
	switch goarch {
	case "amd64", "386":
		return true
	}
	return false
}

func charVal(c byte, signed bool) int {
	if signed {
		return int(int8(c))
	}
	return int(c)
}

// compareEntries is ldconfig's cache order (elf/cache.c compare, glibc ≥
// 2.33): keys descending by LibCmp; for equal keys higher flags first, then
// glibc-hwcaps entries before the others (among themselves by subdirectory
// name, strcmp), then more hwcap bits set first, then higher hwcap, then
// higher osversion. hwcaps names the glibc-hwcaps subdirectories that
// extension entries index.
func compareEntries(a, b *Entry, hwcaps []string) int {
	if r := LibCmp(b.Key, a.Key); r != 0 {
		return r
	}
	if a.Flags != b.Flags {
		return cmp.Compare(b.Flags, a.Flags)
	}
	ax, bx := a.HWCapsSubdir(), b.HWCapsSubdir()
	switch {
	case ax && !bx:
		return -1
	case !ax && bx:
		return 1
	case ax && bx:
		if r := strings.Compare(hwcapsName(a, hwcaps), hwcapsName(b, hwcaps)); r != 0 {
			return r
		}
	}
	// ldconfig compares the legacy hwcap mask, which is 0 for glibc-hwcaps
	// entries (their stored value is computed when the file is written).
	ah, bh := legacyHWCap(a), legacyHWCap(b)
	if r := cmp.Compare(bits.OnesCount64(bh), bits.OnesCount64(ah)); r != 0 {
		return r
	}
	if r := cmp.Compare(bh, ah); r != 0 {
		return r
	}
	return cmp.Compare(b.OSVersion, a.OSVersion)
}

func legacyHWCap(e *Entry) uint64 {
	if e.HWCapsSubdir() {
		return 0
	}
	return e.HWCap
}

// hwcapsName returns the glibc-hwcaps subdirectory an extension entry
// belongs to ("" when the index is out of range).
func hwcapsName(e *Entry, hwcaps []string) string {
	if i := uint32(e.HWCap); uint64(i) < uint64(len(hwcaps)) {
		return hwcaps[i]
	}
	return ""
}

// SortEntries sorts entries in place into the order ldconfig writes them
// (see LibCmp and the package documentation), which glibc's loader needs
// for its binary search. The sort is stable: entries that ldconfig
// considers equal (the same name and type in two directories) keep their
// relative order, and the first of them is the one the loader uses.
// hwcaps are the cache's glibc-hwcaps subdirectory names (Cache.HWCaps).
func SortEntries(entries []Entry, hwcaps []string) {
	slices.SortStableFunc(entries, func(a, b Entry) int { return compareEntries(&a, &b, hwcaps) })
}
