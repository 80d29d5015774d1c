package discover

import "golang.org/x/sys/unix"

func devMajor(rdev uint64) uint32         { return unix.Major(rdev) }
func devMinor(rdev uint64) uint32         { return unix.Minor(rdev) }
func devMkdev(major, minor uint32) uint64 { return unix.Mkdev(major, minor) }
