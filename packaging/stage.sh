#!/bin/sh
# stage.sh BINDIR STAGEDIR: install what nctk's packages hold (the .deb of
# build-deb.sh and the .rpm of build-rpm.sh ship the same files) into the
# empty directory STAGEDIR, from the binaries in BINDIR (`make build`). Run
# from the repository root.
#
#   /usr/bin/<binary>                           scripts/build.sh's bins: nctk,
#                                               nvidia-container-runtime,
#                                               nvidia-container-runtime-hook,
#                                               nvidia-cdi-hook, nctk-driverprobe
#   /usr/bin/<tool> -> <binary>                 NVIDIA's other tool names
#   /etc/nvidia-container-runtime/config.toml   `nvidia-ctk config default`
#   /usr/lib/systemd/system/nvidia-cdi-refresh.{service,path}
#   /usr/lib/udev/rules.d/60-nvidia-cdi-refresh.rules
#   /usr/share/doc/nctk/                        README.md, docs/*.md
set -eu

bindir=${1:?usage: stage.sh BINDIR STAGEDIR}
stage=${2:?usage: stage.sh BINDIR STAGEDIR}
# The binaries and the tool names installed as links NAME:BINARY:
# scripts/build.sh's lists (nvidia-container-runtime.cdi and .legacy are the
# runtime with its mode fixed; NVIDIA ships them in its operator-extensions
# package).
bins=$(sed -n 's/^bins="\(.*\)"$/\1/p' scripts/build.sh)
links=$(sed -n 's/^links="\(.*\)"$/\1/p' scripts/build.sh)
[ -n "$bins" ] && [ -n "$links" ] || { echo "stage.sh: no binaries or links in scripts/build.sh" >&2; exit 1; }

for f in $bins; do
	[ -x "$bindir/$f" ] && [ ! -L "$bindir/$f" ] || { echo "stage.sh: $bindir/$f missing (run make build)" >&2; exit 1; }
done
umask 022
chmod 0755 "$stage"

install -d "$stage/usr/bin"
for f in $bins; do install -m 0755 "$bindir/$f" "$stage/usr/bin/"; done
for l in $links; do ln -s "${l#*:}" "$stage/usr/bin/${l%%:*}"; done

install -d "$stage/etc/nvidia-container-runtime"
"$bindir/nctk" nvidia-ctk config default >"$stage/etc/nvidia-container-runtime/config.toml"
chmod 0644 "$stage/etc/nvidia-container-runtime/config.toml"

install -d "$stage/usr/lib/systemd/system" "$stage/usr/lib/udev/rules.d"
install -m 0644 packaging/systemd/nvidia-cdi-refresh.service packaging/systemd/nvidia-cdi-refresh.path "$stage/usr/lib/systemd/system/"
install -m 0644 packaging/udev/60-nvidia-cdi-refresh.rules "$stage/usr/lib/udev/rules.d/"

install -d "$stage/usr/share/doc/nctk"
install -m 0644 README.md docs/*.md "$stage/usr/share/doc/nctk/"
