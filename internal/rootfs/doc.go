// Package rootfs performs file operations inside a container root without
// ever leaving it: detecting the image's library layout (Root.Target),
// creating directories, files and symlinks, mounting driver files, device
// nodes, tmpfs content and the /proc/driver/nvidia view, and adding
// libraries to the image's ld.so.cache in process (Root.UpdateLdCache,
// Root.UpdateLdCacheFor with PendingLibraryEntries). It also runs the
// host's ldconfig confined to that root.
//
// A container image controls every path below its root: any directory may
// be a symlink to "/etc" or a chain of "..", any file may be a symlink to a
// host file, and the image's contents may change between a check and the
// operation that trusts it. NVIDIA's stack was hit by each of these
// (CVE-2024-0132, CVE-2024-0133, CVE-2024-0134, CVE-2025-23359,
// CVE-2025-23267). This package therefore never works on path strings inside
// the root:
//
//   - The root is opened once as an O_PATH descriptor. Every directory below
//     it is reached with openat2(2) and RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS,
//     so symlinks (absolute or relative) and ".." are resolved as if the
//     root were "/" and can never climb out. Kernels without openat2 fall back
//     to github.com/cyphar/filepath-securejoin's in-root resolver.
//   - The last component of every path is created or opened relative to the
//     already-resolved parent descriptor with O_NOFOLLOW, and the object is
//     checked through its descriptor (fstat), not by name.
//   - A mount's source is opened on the host and cloned with open_tree(2)
//     into a detached mount whose flags (ro, nosuid, nodev, noexec, private
//     propagation) are set with mount_setattr(2) before it is attached; the
//     clone is then attached with move_mount(2) onto the placeholder's
//     descriptor. What gets mounted is exactly what was checked, where it was
//     checked, and it is never writable, not even for an instant. Kernels
//     without the new mount API (before 5.12) use bind mounts through
//     /proc/self/fd magic links and verify the result by device and inode.
//   - Existing symlinks are never followed at a destination: a placeholder
//     whose path is a symlink in the image is an error naming it; a symlink
//     the caller asks for replaces an existing symlink atomically (renameat)
//     but never a regular file or directory (ForceSymlink, for
//     create-symlinks, replaces a file too, never a directory). Modes are
//     changed through O_PATH descriptors (Chmod), files read through
//     descriptors checked with fstat (OpenRegular: no FIFO, no device, a
//     size limit).
//
// Every directory, file and symlink a Root creates, every mode it changes
// and every mount it makes is journaled so that a failed apply can be
// rolled back with Rollback (a symlink it replaced, a file ForceSymlink
// replaced and a file WriteFile replaced are restored). A process killed
// before it could roll back leaves at most its temporary files behind
// (".<name>.nctk-<pid>-<n>"); a Root removes those of processes that are
// gone by itself, once per directory, where
// the same work can have left some: a directory it writes a file into, and
// one where a link it makes meets an entry already there (a link makes a
// temporary only to replace one). RemovedStale says what went.
//
// RunLdconfig (and Ldconfig.Run, on the file PrepareLdconfig opened
// earlier) runs the host's ldconfig from a sealed memfd copy in a child that has its
// own mount, PID, IPC, UTS and network namespaces, has pivoted into the
// container root, sees empty tmpfs over /proc, /sys and /dev, has an empty
// environment, a reduced capability bounding set, no_new_privs and
// resource limits. The child is this binary re-executed: programs that use
// either must call MaybeRunChild first thing in main (and in TestMain).
package rootfs
