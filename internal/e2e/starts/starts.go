// Package starts counts how often a program is started while something
// runs: the tests' and the real-host check's way to see how many hook
// processes a container's create cost.
package starts

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// During runs f and returns how often the file at path was opened
// meanwhile: inotify's IN_OPEN, which an exec of the file raises too. Its
// closes are watched as well, since inotify merges an event into an
// unread one just like it. f's error is returned with the count.
func During(path string, f func() error) (int, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return 0, fmt.Errorf("inotify: %w", err)
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, path, unix.IN_OPEN|unix.IN_CLOSE); err != nil {
		return 0, fmt.Errorf("watch %s: %w", path, err)
	}
	ferr := f()
	n := 0
	buf := make([]byte, 64<<10)
	for {
		m, err := unix.Read(fd, buf)
		if err != nil || m <= 0 {
			return n, ferr
		}
		for off := 0; off+unix.SizeofInotifyEvent <= m; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			if ev.Mask&unix.IN_OPEN != 0 {
				n++
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
}
