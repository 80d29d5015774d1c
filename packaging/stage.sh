#!/bin/sh
# stage.sh BINDIR STAGEDIR: install what nctk's packages hold (the .deb of
# build-deb.sh and the .rpm of build-rpm.sh ship the same files) into the
# empty directory STAGEDIR, from the binaries in BINDIR (nctk,
# nvidia-cdi-hook, nctk-driverprobe: `make build`). Run from the repository
# root.
#
#   /usr/bin/nctk, /usr/bin/nvidia-cdi-hook,    the binaries
#   /usr/bin/nctk-driverprobe
#   /usr/bin/<tool> -> nctk                     NVIDIA's tool names
#   /etc/nvidia-container-runtime/config.toml   `nvidia-ctk config default`
#   /usr/lib/systemd/system/nvidia-cdi-refresh.{service,path}
#   /usr/lib/udev/rules.d/60-nvidia-cdi-refresh.rules
#   /usr/share/doc/nctk/                        README.md, docs/*.md
set -eu

bindir=${1:?usage: stage.sh BINDIR STAGEDIR}
stage=${2:?usage: stage.sh BINDIR STAGEDIR}
# The tool names installed as links to nctk: scripts/build.sh's list
# (nvidia-container-runtime.cdi and .legacy are the runtime with its mode
# fixed; NVIDIA ships them in its operator-extensions package).
tools=$(sed -n 's/^links="\(.*\)"$/\1/p' scripts/build.sh)
[ -n "$tools" ] || { echo "stage.sh: no tool names in scripts/build.sh" >&2; exit 1; }

for f in nctk nvidia-cdi-hook nctk-driverprobe; do
	[ -x "$bindir/$f" ] || { echo "stage.sh: $bindir/$f missing (run make build)" >&2; exit 1; }
done
umask 022
chmod 0755 "$stage"

install -d "$stage/usr/bin"
install -m 0755 "$bindir/nctk" "$bindir/nvidia-cdi-hook" "$bindir/nctk-driverprobe" "$stage/usr/bin/"
for t in $tools; do ln -s nctk "$stage/usr/bin/$t"; done

install -d "$stage/etc/nvidia-container-runtime"
"$bindir/nctk" nvidia-ctk config default >"$stage/etc/nvidia-container-runtime/config.toml"
chmod 0644 "$stage/etc/nvidia-container-runtime/config.toml"

install -d "$stage/usr/lib/systemd/system" "$stage/usr/lib/udev/rules.d"
install -m 0644 packaging/systemd/nvidia-cdi-refresh.service packaging/systemd/nvidia-cdi-refresh.path "$stage/usr/lib/systemd/system/"
install -m 0644 packaging/udev/60-nvidia-cdi-refresh.rules "$stage/usr/lib/udev/rules.d/"

install -d "$stage/usr/share/doc/nctk"
install -m 0644 README.md docs/*.md "$stage/usr/share/doc/nctk/"
