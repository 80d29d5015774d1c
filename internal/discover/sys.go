package discover

import (
	"io/fs"
	"syscall"

	"golang.org/x/sys/unix"
)

func statT(fi fs.FileInfo) (*syscall.Stat_t, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return st, ok
}

func devMajor(rdev uint64) uint32         { return unix.Major(rdev) }
func devMinor(rdev uint64) uint32         { return unix.Minor(rdev) }
func devMkdev(major, minor uint32) uint64 { return unix.Mkdev(major, minor) }
