package engine

import (
	"io/fs"
	"syscall"
)

// fileOwner returns the uid and gid of st, or -1, -1 when unknown.
func fileOwner(st fs.FileInfo) (int, int) {
	if s, ok := st.Sys().(*syscall.Stat_t); ok {
		return int(s.Uid), int(s.Gid)
	}
	return -1, -1
}
