package plan

import (
	"fmt"
	"path"
)

// UserMountError reports that a path a plan creates or changes in the
// container (a driver file's mount point, a driver symlink, a device
// node's mount point, ld.so.cache, the ld.so.conf.d drop-in) lies below a
// mount of a host directory, such as a user volume over the image's
// library directory (`docker run -v /host/dir:/usr/lib/x86_64-linux-gnu`):
// the mount points would be created in that host directory, and files made
// in the image would be hidden. The runtime (from config.json's bind
// mounts) and configure (from the container's mount table) refuse such a
// container with it before anything changes.
type UserMountError struct {
	Path        string // the container path the plan creates or changes
	Destination string // the mount's container path
	Source      string // the host path it shows (configure: "SOURCE:ROOT" from mountinfo when no host mount shows it)
}

func (e *UserMountError) Error() string {
	return fmt.Sprintf("%s is below the mount of host path %s at %s: GPU driver files are not created in a mounted host directory; mount the volume elsewhere",
		e.Path, e.Source, e.Destination)
}

// Overlaps reports whether one of the container paths a is at, above or
// below one of the container paths b ("/" overlaps everything).
func Overlaps(a, b []string) bool {
	for _, x := range a {
		x = path.Clean("/" + x)
		for _, y := range b {
			if overlap(x, path.Clean("/"+y)) {
				return true
			}
		}
	}
	return false
}

// OverlapsClean is Overlaps for one path d against others, all of them
// clean absolute paths already (path.Clean("/"+p)): no path cleaned again
// for every pair, for callers that test many (the runtime's create path).
func OverlapsClean(d string, others []string) bool {
	for _, o := range others {
		if overlap(d, o) {
			return true
		}
	}
	return false
}

// overlap: the clean absolute paths x and y are at, above or below one
// another.
func overlap(x, y string) bool {
	return x == "/" || y == "/" || x == y || below(x, y) || below(y, x)
}

// below: the clean path x is below the clean path y (not "/").
func below(x, y string) bool {
	return len(x) > len(y) && x[len(y)] == '/' && x[:len(y)] == y
}
