// Package atomicfile replaces files atomically: every reader sees either the
// old content or the new one, never a mix, and a failed write leaves the
// file as it was and no temporary file behind.
//
// WriteFile writes the data to a temporary file in the target's directory,
// gives it its mode and owner, optionally syncs it, and renames it over the
// target (syncing the directory afterwards when asked). Options say what
// the callers differ in: the mode and owner of the result, whether those of
// the file being replaced are kept, whether a symbolic link at the target is
// followed or replaced, whether the write is made durable, and whether
// missing parent directories are created.
package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// DefaultMode is the mode of a new file when Options.Mode is zero.
const DefaultMode fs.FileMode = 0o644

// Owner is a file's owner. -1 for either ID leaves that ID as the
// temporary file was created with (the writing process's).
type Owner struct {
	UID, GID int
}

// Options says how WriteFile writes. The zero value writes a file with mode
// 0644 owned by the calling process, replaces a symbolic link at the
// target, does not sync and creates no directories.
type Options struct {
	// Mode is the permission bits of the written file (DefaultMode when
	// zero). With KeepExisting it applies only when there is no file to
	// replace.
	Mode fs.FileMode
	// Owner, when non-nil, is given to the written file; nil leaves it
	// owned by the calling process. With KeepExisting it applies only when
	// there is no file to replace.
	Owner *Owner
	// KeepExisting gives the written file the permission bits and owner of
	// the file it replaces (the file path names, through symbolic links).
	KeepExisting bool
	// FollowSymlinks writes the file a symbolic link at path resolves to,
	// so that the link stays; otherwise the link itself is replaced by the
	// new file. A link that does not resolve (dangling) is replaced.
	FollowSymlinks bool
	// Sync flushes the file to stable storage before the rename and the
	// directory after it, so the new content survives a crash once
	// WriteFile returns.
	Sync bool
	// DirMode, when non-zero, creates missing parent directories with this
	// mode (before the umask); when zero a missing directory is an error.
	DirMode fs.FileMode
	// ReplacePipe lets a named pipe at the target be replaced too (with
	// KeepExisting, the new file gets its mode and owner): specfeed's
	// stand-in for the config.json it is about to hold.
	ReplacePipe bool
}

// NotRegularError is WriteFile's error when the file to replace is not a
// regular file (a directory, a device, a FIFO, a socket): WriteFile never
// replaces one (but a FIFO with Options.ReplacePipe).
type NotRegularError struct {
	Path string
	Mode fs.FileMode
}

func (e *NotRegularError) Error() string {
	return fmt.Sprintf("%s is not a regular file (mode %v)", e.Path, e.Mode)
}

// WriteFile replaces the file path with data atomically, as o says. When
// path exists it must be a regular file (see NotRegularError). On any error
// the file is left as it was and the temporary file is removed; the one
// exception is a failed sync of the directory after the rename (Sync), when
// the new content is in place but not known to be durable.
//
// Errors carry the operation and the file they concern; callers add what
// the file is.
func WriteFile(path string, data []byte, o Options) error {
	return write(path, data, o, nil)
}

// step names one system operation of write.
type step int

const (
	stepCreate step = iota
	stepWrite
	stepChmod
	stepChown
	stepSync
	stepClose
	stepRename
	stepSyncDir
)

// write is WriteFile. fail, when non-nil, is asked before each step and a
// non-nil answer is that step's error (the tests' way to fail any step).
func write(path string, data []byte, o Options, fail func(step) error) (err error) {
	try := func(s step) error {
		if fail == nil {
			return nil
		}
		return fail(s)
	}
	target := path
	if o.FollowSymlinks {
		if resolved, err := filepath.EvalSymlinks(path); err == nil {
			target = resolved
		}
	}
	mode := o.Mode
	if mode == 0 {
		mode = DefaultMode
	}
	uid, gid := -1, -1
	if o.Owner != nil {
		uid, gid = o.Owner.UID, o.Owner.GID
	}
	st, err := os.Stat(target)
	switch {
	case err == nil:
		if !st.Mode().IsRegular() && (!o.ReplacePipe || st.Mode().Type() != fs.ModeNamedPipe) {
			return &NotRegularError{Path: target, Mode: st.Mode()}
		}
		if o.KeepExisting {
			mode = st.Mode().Perm()
			uid, gid = ownerOf(st)
		}
	case errors.Is(err, fs.ErrNotExist):
	default:
		return err
	}
	dir := filepath.Dir(target)
	if o.DirMode != 0 {
		if err := os.MkdirAll(dir, o.DirMode); err != nil {
			return err
		}
	}

	var tmp *os.File
	if err = try(stepCreate); err == nil {
		tmp, err = os.CreateTemp(dir, "."+filepath.Base(target)+".tmp-*")
	}
	if err != nil {
		return err
	}
	closed, renamed := false, false
	defer func() {
		if err != nil && !renamed {
			if !closed {
				tmp.Close()
			}
			os.Remove(tmp.Name())
		}
	}()
	if err = try(stepWrite); err == nil {
		_, err = tmp.Write(data)
	}
	if err != nil {
		return err
	}
	if err = try(stepChmod); err == nil {
		err = tmp.Chmod(mode)
	}
	if err != nil {
		return err
	}
	if (uid >= 0 || gid >= 0) && (uid != os.Geteuid() || gid != os.Getegid()) {
		if err = try(stepChown); err == nil {
			err = tmp.Chown(uid, gid)
		}
		if err != nil {
			return fmt.Errorf("set owner %d:%d: %w", uid, gid, err)
		}
	}
	if o.Sync {
		if err = try(stepSync); err == nil {
			err = tmp.Sync()
		}
		if err != nil {
			return err
		}
	}
	closed = true
	if err = try(stepClose); err == nil {
		err = tmp.Close()
	} else {
		tmp.Close()
	}
	if err != nil {
		return err
	}
	if err = try(stepRename); err == nil {
		err = os.Rename(tmp.Name(), target)
	}
	if err != nil {
		return err
	}
	renamed = true
	if o.Sync {
		if err = try(stepSyncDir); err == nil {
			err = syncDir(dir)
		}
		if err != nil {
			return fmt.Errorf("sync directory %s: %w", dir, err)
		}
	}
	return nil
}

// syncDir flushes directory dir. A directory that cannot be opened or a
// file system that cannot sync directories (EINVAL) is not an error.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return nil
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) {
		return err
	}
	return nil
}

// ownerOf returns the owner of the file st describes, or -1, -1 when the
// platform does not say.
func ownerOf(st fs.FileInfo) (int, int) {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return int(s.Uid), int(s.Gid)
	}
	return -1, -1
}
