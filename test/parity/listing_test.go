package parity

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/ldcache"
)

// listing is a normalized description of the tree under root, one line per
// path in lexical order: the path, its type, permission bits, and for a
// link its target, for a device its numbers, for a small text file its
// content, for ld.so.cache its parsed entries, for an ELF file "elf", else
// a digest. Names with random parts (os.CreateTemp's digits, UUIDs) are
// normalized to "*".
func listing(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := "/" + strings.TrimPrefix(strings.TrimPrefix(p, root), "/")
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		perm := fmt.Sprintf("%04o", st.Mode&07777)
		name := randomName(rel)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			fmt.Fprintf(&b, "%s dir %s\n", name, perm)
		case unix.S_IFLNK:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, "%s link -> %s\n", name, target)
		case unix.S_IFCHR, unix.S_IFBLK:
			kind := "chr"
			if st.Mode&unix.S_IFMT == unix.S_IFBLK {
				kind = "blk"
			}
			fmt.Fprintf(&b, "%s %s %s %d:%d\n", name, kind, perm, unix.Major(st.Rdev), unix.Minor(st.Rdev))
		case unix.S_IFREG:
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, "%s file %s %s\n", name, perm, describe(rel, data))
		default:
			fmt.Fprintf(&b, "%s other %s\n", name, perm)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("listing %s: %v", root, err)
	}
	return b.String()
}

var (
	// createTempName: os.CreateTemp's random digits replacing "*" in a
	// pattern such as 00-nvcr-*.conf.
	createTempName = regexp.MustCompile(`-[0-9]{6,}(\.[a-z]+)?$`)
	// uuidName: a UUID in a file name.
	uuidName = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
)

// randomName replaces the random parts of a path's last element with "*".
func randomName(p string) string {
	dir, base := filepath.Split(p)
	base = createTempName.ReplaceAllString(base, "-*$1")
	base = uuidName.ReplaceAllString(base, "*")
	return dir + base
}

// describe is a file's content in a listing line.
func describe(rel string, data []byte) string {
	if filepath.Base(rel) == "ld.so.cache" {
		c, err := ldcache.Parse(data)
		if err != nil {
			return "ld.so.cache unreadable: " + err.Error()
		}
		var lines []string
		for _, e := range c.Entries {
			lines = append(lines, fmt.Sprintf("\n  %s flags=%#x hwcap=%#x => %s", e.Key, e.Flags, e.HWCap, e.Value))
		}
		return "ld.so.cache" + strings.Join(lines, "")
	}
	if bytes.HasPrefix(data, []byte("\x7fELF")) {
		return "elf"
	}
	if len(data) <= 4096 && isText(data) {
		return strconv.Quote(string(data))
	}
	return fmt.Sprintf("sha256:%x", sha256.Sum256(data))
}

func isText(data []byte) bool {
	for _, c := range data {
		if c < 0x20 && c != '\n' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// lineDiff lists the lines of want missing from got (-) and those of got
// not in want (+), each in its order.
func lineDiff(want, got string) string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for _, l := range wl {
		if !slices.Contains(gl, l) {
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	for _, l := range gl {
		if !slices.Contains(wl, l) {
			fmt.Fprintf(&b, "+ %s\n", l)
		}
	}
	if b.Len() == 0 {
		return "(same lines, other order)\n--- want\n" + want + "--- got\n" + got
	}
	return b.String()
}

// jsonString is s as a JSON string.
func jsonString(s string) (string, error) {
	b, err := json.Marshal(s)
	return string(b), err
}
