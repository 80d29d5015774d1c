# gpu-image.sh — sourced by demo.sh and check-real-host-containers.sh.
#
# build_gpu_image ROOTFS REPO: a tiny image in ROOTFS with busybox-static,
# the host's glibc and cudaprobe (REPO/internal/e2e/testdata/cudaprobe.c:
# dlopens libcuda.so.1 and prints cuDriverGetVersion, cuInit and the device
# count) — no NVIDIA file in it. Needs busybox, gcc and ldconfig.
build_gpu_image() {
	local rootfs=$1 repo=$2 libdir=usr/lib/x86_64-linux-gnu lib src d applet
	mkdir -p "$rootfs"/{usr/bin,usr/sbin,$libdir,lib64,etc/ld.so.conf.d,proc,sys,dev,tmp,root} || return 1
	ln -s usr/bin "$rootfs/bin"
	ln -s usr/sbin "$rootfs/sbin"
	ln -s usr/lib "$rootfs/lib"
	chmod 1777 "$rootfs/tmp"
	install -m 0755 "$(command -v busybox)" "$rootfs/usr/bin/busybox" || return 1
	for applet in $("$rootfs/usr/bin/busybox" --list); do
		case $applet in busybox | ldconfig) continue ;; esac
		ln -sf busybox "$rootfs/usr/bin/$applet"
	done
	for lib in ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 libgcc_s.so.1; do
		src=""
		for d in /usr/lib/x86_64-linux-gnu /lib/x86_64-linux-gnu /usr/lib64 /lib64; do
			if [ -f "$d/$lib" ]; then
				src="$d/$lib"
				break
			fi
		done
		if [ -z "$src" ]; then
			echo "build_gpu_image: host library $lib not found" >&2
			return 1
		fi
		cp -L "$src" "$rootfs/$libdir/$lib" || return 1
	done
	ln -s "/$libdir/ld-linux-x86-64.so.2" "$rootfs/lib64/ld-linux-x86-64.so.2"
	echo 'include /etc/ld.so.conf.d/*.conf' >"$rootfs/etc/ld.so.conf"
	printf '/usr/local/lib\n/usr/lib/x86_64-linux-gnu\n' >"$rootfs/etc/ld.so.conf.d/x86_64-linux-gnu.conf"
	echo 'root:x:0:0:root:/root:/bin/sh' >"$rootfs/etc/passwd"
	echo 'root:x:0:' >"$rootfs/etc/group"
	echo '12.0' >"$rootfs/etc/debian_version"
	gcc -O2 -o "$rootfs/usr/bin/cudaprobe" "$repo/internal/e2e/testdata/cudaprobe.c" -Wl,--as-needed -ldl || return 1
	ldconfig -r "$rootfs"
}
