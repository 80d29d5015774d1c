// Package specfeed lets a low-level runtime start before its config.json
// is final. The runtime wrapper spends milliseconds editing config.json,
// and runc spends milliseconds starting before it reads it (a Go program
// with cgo and its package inits, ~3-4 ms on a 2-vCPU VM); done one after
// the other, a create pays both.
//
// Open replaces config.json by a named pipe that holds nothing yet (the
// original file is kept under a hard link), so runc can be started at once:
// if it gets to its config.json before the wrapper is done, its read waits
// on the pipe. Commit then puts the final content in place as a regular
// file, renamed over the pipe as an atomic write would, and writes the same
// bytes into the pipe for a reader that already opened it; Keep does the
// same with the original file (a container the wrapper leaves as it is);
// Restore puts the original file back and gives a waiting reader an empty
// pipe (the caller stops its runtime first). Whichever way, config.json
// ends as a regular file, and a reader sees one whole document: the final
// one, the original, or none.
//
// A reader that opens config.json while it is the pipe and is not the
// runtime the caller started would take the bytes meant for it: only
// callers that own the bundle for the create (the runtime wrapper an
// engine runs) use this.
//
// A caller killed before it ends the feed leaves config.json the pipe;
// Recover, on the next use of the bundle, puts the original back.
package specfeed

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nctk/nctk/internal/atomicfile"
)

// Feed is a config.json replaced by a pipe until Commit, Keep or Restore.
type Feed struct {
	path  string   // config.json
	saved string   // the original file, under a hard link
	pipe  *os.File // the pipe, open for reading and writing (never blocks on open)
	done  bool
}

// Open replaces the regular file at path by an empty named pipe, keeping
// the original under a hard link in the same directory. On any error path
// is left as it was.
func Open(path string) (*Feed, error) {
	f := &Feed{path: path}
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return nil, fmt.Errorf("feed %s: %w", path, &os.PathError{Op: "lstat", Path: path, Err: err})
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("feed %s: not a regular file", path)
	}
	dir, base := filepath.Split(path)
	tag := strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	f.saved = filepath.Join(dir, savedPrefix(base)+tag)
	if err := unix.Link(path, f.saved); err != nil {
		return nil, fmt.Errorf("feed %s: %w", path, &os.PathError{Op: "link", Path: f.saved, Err: err})
	}
	fifo := filepath.Join(dir, "."+base+".nctk-pipe-"+tag)
	fail := func(op, p string, err error) (*Feed, error) {
		if f.pipe != nil {
			f.pipe.Close()
		}
		_ = unix.Unlink(fifo)
		_ = unix.Unlink(f.saved)
		return nil, fmt.Errorf("feed %s: %w", path, &os.PathError{Op: op, Path: p, Err: err})
	}
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		return fail("mkfifo", fifo, err)
	}
	// O_RDWR: the open does not wait for a reader, and while it is held a
	// reader's open does not wait for a writer, nor does its read end
	// before Commit, Keep or Restore.
	fd, err := unix.Open(fifo, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fail("open", fifo, err)
	}
	f.pipe = os.NewFile(uintptr(fd), fifo)
	if err := unix.Fchown(fd, int(st.Uid), int(st.Gid)); err != nil {
		return fail("chown", fifo, err)
	}
	if err := unix.Fchmod(fd, st.Mode&0o7777); err != nil {
		return fail("chmod", fifo, err)
	}
	if err := unix.Rename(fifo, path); err != nil {
		return fail("rename", fifo, err)
	}
	return f, nil
}

// savedPrefix starts the name of the hard link Open keeps the original
// file base under (then its pid, a dash and a time): what Recover looks for.
func savedPrefix(base string) string { return "." + base + ".nctk-orig-" }

// ErrDone is the error of Commit, Keep or Restore on a feed already ended.
var ErrDone = errors.New("config.json feed already ended")

// Commit makes data config.json's content: a regular file with the
// original's mode and owner (the pipe was given them), written by the one
// atomic writer over the pipe, and the same bytes through the pipe for a
// reader that opened it before. On an error before the rename config.json
// is the pipe still (Restore puts the original back); after it, the error
// says so and config.json holds data.
func (f *Feed) Commit(data []byte) error {
	if f.done {
		return ErrDone
	}
	// Room for all of data in the pipe, so that writing it never waits
	// for the reader (which may never come: a runtime that failed first).
	if err := f.fit(len(data)); err != nil {
		return err
	}
	if err := atomicfile.WriteFile(f.path, data, atomicfile.Options{KeepExisting: true, ReplacePipe: true}); err != nil {
		return fmt.Errorf("feed %s: %w", f.path, err)
	}
	return f.end(data)
}

// Keep puts the original config.json back, unchanged (the same file), and
// gives a reader that opened the pipe its content, data (the original's
// bytes, as read before Open).
func (f *Feed) Keep(data []byte) error {
	if f.done {
		return ErrDone
	}
	if err := f.fit(len(data)); err != nil {
		return err
	}
	if err := unix.Rename(f.saved, f.path); err != nil {
		return fmt.Errorf("feed %s: %w", f.path, &os.PathError{Op: "rename", Path: f.saved, Err: err})
	}
	return f.end(data)
}

// Restore puts the original config.json back and closes the pipe empty:
// a reader that opened it reads no document. The caller stops the runtime
// it started before, so that nothing created reads the original.
func (f *Feed) Restore() error {
	if f.done {
		return ErrDone
	}
	f.done = true
	err := unix.Rename(f.saved, f.path)
	f.pipe.Close()
	if err != nil {
		_ = unix.Unlink(f.saved)
		return fmt.Errorf("feed %s: restore: %w", f.path, &os.PathError{Op: "rename", Path: f.saved, Err: err})
	}
	return nil
}

// fit makes the pipe hold n bytes without a reader.
func (f *Feed) fit(n int) error {
	fd := int(f.pipe.Fd())
	size, err := unix.FcntlInt(uintptr(fd), unix.F_GETPIPE_SZ, 0)
	if err == nil && size >= n {
		return nil
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETPIPE_SZ, n); err != nil {
		return fmt.Errorf("feed %s: pipe size %d bytes: %w", f.path, n, err)
	}
	return nil
}

// end writes data into the pipe (which fit made room for), closes it, and
// drops the hard link to the original.
func (f *Feed) end(data []byte) error {
	f.done = true
	_, err := f.pipe.Write(data)
	if cerr := f.pipe.Close(); err == nil {
		err = cerr
	}
	if f.saved != "" {
		if uerr := unix.Unlink(f.saved); uerr != nil && !errors.Is(uerr, unix.ENOENT) && err == nil {
			err = uerr
		}
	}
	if err != nil {
		return fmt.Errorf("feed %s: pipe: %w", f.path, err)
	}
	return nil
}

// Recover puts back the original config.json at path that a feed's owner
// left as the pipe when it was killed (SIGKILL) before Commit, Keep or
// Restore: config.json a named pipe, and beside it the one hard link Open
// made to the original, named after a process that no longer runs. It
// reports whether it did; a path that is not such a pipe is left alone (a
// live owner's feed included), as is one with more than one such link
// (which to take is not known: the error says so).
func Recover(path string) (bool, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return false, nil
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false, fmt.Errorf("recover %s: %w", path, err)
	}
	prefix := savedPrefix(base)
	var saved []string
	for _, e := range ents {
		tag, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || !e.Type().IsRegular() {
			continue
		}
		pid, _, _ := strings.Cut(tag, "-")
		n, err := strconv.Atoi(pid)
		if err != nil || n <= 0 {
			continue
		}
		if err := unix.Kill(n, 0); err == nil || errors.Is(err, unix.EPERM) {
			return false, nil // its owner runs: its feed, not a leftover
		}
		saved = append(saved, filepath.Join(dir, e.Name()))
	}
	switch len(saved) {
	case 0:
		return false, nil
	case 1:
	default:
		return false, fmt.Errorf("recover %s: %d saved originals beside it (%s): put the right one back as config.json by hand", path, len(saved), strings.Join(saved, ", "))
	}
	if err := unix.Rename(saved[0], path); err != nil {
		return false, fmt.Errorf("recover %s: %w", path, &os.PathError{Op: "rename", Path: saved[0], Err: err})
	}
	return true, nil
}
