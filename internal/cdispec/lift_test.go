package cdispec

import (
	"reflect"
	"strings"
	"testing"

	cdispecs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nctk/nctk/internal/hookargs"
)

func TestLiftOwnHooks(t *testing.T) {
	const own, other = "/usr/bin/nvidia-cdi-hook", "/opt/other/nvidia-cdi-hook"
	isOwn := func(p string) bool { return p == own }
	hk := func(p, args string) *cdispecs.Hook {
		return &cdispecs.Hook{HookName: "createContainer", Path: p, Args: strings.Fields(args), Env: []string{"A=1"}}
	}
	links := "create-symlinks --link a.so.1::/lib/a.so"
	ld := "update-ldcache --folder /lib --lib /lib/a.so.1 --lib /lib/a.so"
	ddnm := "disable-device-node-modification"
	compat := "enable-cuda-compat --host-driver-version=470.256.02"
	lifted := OwnHooks{Links: []hookargs.Link{{Target: "a.so.1", Path: "/lib/a.so"}}, LdconfigDirs: []string{"/lib"},
		Libs: []string{"/lib/a.so.1", "/lib/a.so"}, Hooks: 2}
	tests := []struct {
		name   string
		hooks  []*cdispecs.Hook
		mounts []string
		keep   bool
		// after: the caller masks params in the created container.
		after bool
		// masked: the spec's masked and read-only paths.
		masked []string
		// devUnknown: the container's /dev is not only config.json's nodes.
		devUnknown bool
		// noRebuild: update-ldcache without --lib stays a hook.
		noRebuild  bool
		specMounts []string         // the edits' own mounts (container paths)
		want       []*cdispecs.Hook // nil: e returned unchanged
		work       OwnHooks
	}{
		{name: "chain, proc hook kept", hooks: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook "+links+" ; "+ld+" ; "+ddnm)}, keep: true,
			want: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook "+ddnm)}, work: lifted},
		// With AfterCreate the caller masks the params file after the
		// create: the part is lifted with its host directory; a second
		// mask from another directory stops the lifting.
		{name: "chain, proc hook lifted for after create", hooks: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook "+links+" ; "+ld+" ; "+ddnm+" ; update-application-profile")},
			keep: true, after: true, want: []*cdispecs.Hook{},
			work: OwnHooks{Links: lifted.Links, LdconfigDirs: lifted.LdconfigDirs, Libs: lifted.Libs, MaskParams: true, AppProfile: true, Hooks: 4}},
		{name: "after create, the host dir kept", hooks: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook "+ddnm+" --host-dir /run/p")}, keep: true, after: true,
			want: []*cdispecs.Hook{}, work: OwnHooks{MaskParams: true, ParamsHostDir: "/run/p", Hooks: 1}},
		{name: "after create, two host dirs: the second stays", hooks: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook "+ddnm+" ; "+ddnm+" --host-dir /run/p")}, keep: true, after: true,
			want: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook "+ddnm+" --host-dir /run/p")}, work: OwnHooks{MaskParams: true, Hooks: 1}},
		{name: "after create: /dev links lifted", hooks: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook "+links), hk(own, "nvidia-cdi-hook create-symlinks --link ../card1::/dev/dri/by-path/pci-0000:01:00.0-card")},
			after: true, mounts: []string{"/dev"}, want: []*cdispecs.Hook{},
			work: OwnHooks{Links: lifted.Links, DevLinks: []hookargs.Link{{Target: "../card1", Path: "/dev/dri/by-path/pci-0000:01:00.0-card"}}, Hooks: 2}},
		{name: "after create: /dev links under a mask stop", hooks: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook create-symlinks --link ../card1::/dev/dri/by-path/pci-0000:01:00.0-card")},
			after: true, masked: []string{"/dev/dri"}, mounts: []string{"/dev"}},
		{name: "after create: /dev links, /dev not known: stop", hooks: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook create-symlinks --link ../card1::/dev/dri/by-path/pci-0000:01:00.0-card")},
			after: true, devUnknown: true, mounts: []string{"/dev"}},
		{name: "without after create: /dev links stop", hooks: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook create-symlinks --link ../card1::/dev/dri/by-path/pci-0000:01:00.0-card")},
			mounts: []string{"/dev"}},
		{name: "after create, params masked: the part stays", hooks: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook "+links+" ; "+ddnm)}, keep: true, after: true,
			masked: []string{"/proc/driver/nvidia"}, want: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook "+ddnm)}, work: OwnHooks{Links: lifted.Links, Hooks: 1}},
		{name: "after create without a driver: dropped", hooks: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook "+ddnm)}, after: true,
			want: []*cdispecs.Hook{}, work: OwnHooks{Hooks: 1}},
		{name: "chain, proc hook dropped", hooks: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook "+links+" ; "+ld+" ; "+ddnm)},
			want: []*cdispecs.Hook{}, work: OwnHooks{Links: lifted.Links, LdconfigDirs: lifted.LdconfigDirs, Libs: lifted.Libs, Hooks: 3}},
		{name: "nvidia-ctk hook form, separate entries", hooks: []*cdispecs.Hook{hk(own, "nvidia-ctk hook "+links), hk(own, "nvidia-ctk hook "+ld)},
			want: []*cdispecs.Hook{}, work: lifted},
		{name: "foreign hook first: nothing lifted", hooks: []*cdispecs.Hook{hk(other, "nvidia-cdi-hook noop"), hk(own, "nvidia-cdi-hook "+links)}},
		// NVIDIA's layout (one hook per step, ldconfig over folders):
		// rebuilt by the caller.
		{name: "update-ldcache without --lib: rebuild", keep: true, hooks: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook "+links), hk(own, "nvidia-cdi-hook "+compat),
			hk(own, "nvidia-cdi-hook update-ldcache --folder /lib --folder /usr/lib --ldconfig-path /sbin/ldconfig.real"), hk(own, "nvidia-cdi-hook "+ddnm), hk(own, "nvidia-cdi-hook update-application-profile")},
			want: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook "+ddnm+" ; update-application-profile")},
			work: OwnHooks{Links: lifted.Links, Compat: []hookargs.EnableCudaCompat{{HostDriverVersion: "470.256.02"}}, LdconfigDirs: []string{"/lib", "/usr/lib"},
				Rebuild: true, LdconfigPath: "/sbin/ldconfig.real", Hooks: 3}},
		{name: "rebuild, everything lifted", hooks: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook "+links), hk(own, "nvidia-cdi-hook update-ldcache --folder /lib"),
			hk(own, "nvidia-cdi-hook "+ddnm), hk(own, "nvidia-cdi-hook update-application-profile")},
			want: []*cdispecs.Hook{}, work: OwnHooks{Links: lifted.Links, LdconfigDirs: []string{"/lib"}, Rebuild: true, AppProfile: true, Hooks: 4}},
		{name: "a second rebuild stops", hooks: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook update-ldcache --folder /lib"), hk(own, "nvidia-cdi-hook update-ldcache --folder /opt")},
			want: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook update-ldcache --folder /opt")}, work: OwnHooks{LdconfigDirs: []string{"/lib"}, Rebuild: true, Hooks: 1}},
		{name: "--lib after a rebuild stops", hooks: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook update-ldcache --folder /opt ; "+ld)},
			want: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook "+ld)}, work: OwnHooks{LdconfigDirs: []string{"/opt"}, Rebuild: true, Hooks: 1}},
		{name: "rebuild after --lib stops", hooks: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook "+ld+" ; update-ldcache --folder /opt")},
			want: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook update-ldcache --folder /opt")}, work: OwnHooks{LdconfigDirs: lifted.LdconfigDirs, Libs: lifted.Libs, Hooks: 1}},
		{name: "rebuild, ld.so.conf.d mounted: not lifted", hooks: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook update-ldcache --folder /lib")}, mounts: []string{"/etc/ld.so.conf.d"}},
		{name: "rebuild with --container-spec: not lifted", hooks: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook update-ldcache --folder /lib --container-spec /x.json")}},
		// With NoRebuild (the rebuild cannot reproduce the image): what
		// stays after the lifting stopped runs as one chained process, in
		// the same order.
		{name: "NoRebuild: update-ldcache without --lib stops", noRebuild: true, hooks: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook "+links), hk(own, "nvidia-cdi-hook update-ldcache --folder /lib"), hk(own, "nvidia-cdi-hook noop")},
			want: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook update-ldcache --folder /lib ; noop")},
			work: OwnHooks{Links: lifted.Links, Hooks: 1}},
		{name: "NoRebuild: separate hooks after the stop: one chain", noRebuild: true, keep: true, hooks: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook "+links),
			hk(own, "nvidia-cdi-hook update-ldcache --folder /lib"), hk(own, "nvidia-cdi-hook "+ddnm), hk(own, "nvidia-cdi-hook update-application-profile")},
			want: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook update-ldcache --folder /lib ; "+ddnm+" ; update-application-profile")},
			work: OwnHooks{Links: lifted.Links, Hooks: 1}},
		{name: "NoRebuild: nothing lifted, separate hooks: one chain", noRebuild: true, hooks: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook update-ldcache --folder /lib"), hk(own, "nvidia-cdi-hook "+ddnm)},
			want: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook update-ldcache --folder /lib ; "+ddnm)}},
		{name: "NoRebuild: not chained: another env, a timeout, another program form, a foreign hook between", noRebuild: true,
			hooks: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook update-ldcache --folder /lib"), withEnv(hk(own, "nvidia-cdi-hook noop"), "B=2"),
				withTimeout(hk(own, "nvidia-cdi-hook noop")), hk(own, "nvidia-ctk hook noop"), hk(other, "nvidia-cdi-hook noop"), hk(own, "nvidia-cdi-hook noop")}},
		{name: "unknown hook in a chain keeps the rest", hooks: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook "+links+" ; chmod --mode 0755 --path /x ; "+ld)},
			want: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook chmod --mode 0755 --path /x ; "+ld)}, work: OwnHooks{Links: lifted.Links, Hooks: 1}},
		{name: "update-application-profile lifted", hooks: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook "+links+" ; "+ddnm+" ; update-application-profile")},
			want: []*cdispecs.Hook{}, work: OwnHooks{Links: lifted.Links, AppProfile: true, Hooks: 3}},
		{name: "update-application-profile after the proc hook stays", hooks: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook "+links+" ; "+ddnm+" ; update-application-profile")}, keep: true,
			want: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook "+ddnm+" ; update-application-profile")}, work: OwnHooks{Links: lifted.Links, Hooks: 1}},
		{name: "update-application-profile, /dev not known: stays", hooks: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook "+links+" ; update-application-profile")}, devUnknown: true,
			want: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook update-application-profile")}, work: OwnHooks{Links: lifted.Links, Hooks: 1}},
		{name: "update-application-profile, the spec mounts in /dev: stays", hooks: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook "+links+" ; update-application-profile")}, specMounts: []string{"/dev/nvidia0"},
			want: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook update-application-profile")}, work: OwnHooks{Links: lifted.Links, Hooks: 1}},
		{name: "update-application-profile, /etc/nvidia mounted: not lifted", hooks: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook update-application-profile")}, mounts: []string{"/etc/nvidia"}},
		{name: "update-application-profile with --container-spec: not lifted", hooks: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook update-application-profile --container-spec /x.json")}},
		{name: "enable-cuda-compat in the chain lifted", hooks: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook "+links+" ; "+compat+" ; "+ld+" ; "+ddnm)},
			want: []*cdispecs.Hook{}, work: OwnHooks{Links: lifted.Links, LdconfigDirs: lifted.LdconfigDirs, Libs: lifted.Libs,
				Compat: []hookargs.EnableCudaCompat{{HostDriverVersion: "470.256.02"}}, Hooks: 4}},
		{name: "enable-cuda-compat with its directory", hooks: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook enable-cuda-compat --host-cuda-version=12.2 --cuda-compat-container-root /opt/compat")},
			want: []*cdispecs.Hook{}, work: OwnHooks{Compat: []hookargs.EnableCudaCompat{{HostCudaVersion: "12.2", CompatDir: "/opt/compat"}}, Hooks: 1}},
		{name: "compat directory below a mount: not lifted", hooks: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook "+compat+" ; "+ld)}, mounts: []string{"/usr/local/cuda"}},
		{name: "a mount inside the compat directory: not lifted", hooks: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook "+compat)}, mounts: []string{"/usr/local/cuda/compat/libcuda.so.1"}},
		{name: "compat drop-in below a mount: not lifted", hooks: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook "+compat)}, mounts: []string{"/etc/ld.so.conf.d"}},
		{name: "compat with --container-spec: not lifted", hooks: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook "+compat+" --container-spec /x.json")}},
		{name: "global flags: not lifted", hooks: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook --debug "+links)}},
		{name: "other program name: not lifted", hooks: []*cdispecs.Hook{hk(own, "nvidia-container-runtime-hook "+links)}},
		{name: "link below a mount: not lifted", hooks: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook "+links)}, mounts: []string{"/lib"}},
		{name: "ld.so.cache below a mount: not lifted", hooks: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook "+ld)}, mounts: []string{"/etc"}},
		{name: "--container-spec: not lifted", hooks: []*cdispecs.Hook{hk(own, "nvidia-cdi-hook "+links+" --container-spec /x.json")}},
		{name: "other stages left alone", hooks: []*cdispecs.Hook{{HookName: "prestart", Path: own, Args: []string{"nvidia-cdi-hook", "noop"}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := &cdispecs.ContainerEdits{Hooks: tc.hooks, Env: []string{"X=1"}}
			for _, m := range tc.specMounts {
				e.Mounts = append(e.Mounts, &cdispecs.Mount{HostPath: m, ContainerPath: m})
			}
			got, work := LiftOwnHooks(e, isOwn, LiftOptions{KeepInContainer: tc.keep, AfterCreate: tc.after, Masked: tc.masked, Mounts: tc.mounts, DevicesKnown: !tc.devUnknown, NoRebuild: tc.noRebuild})
			if tc.want == nil {
				if got != e || !reflect.DeepEqual(work, OwnHooks{}) {
					t.Errorf("lifted %+v from %+v, want nothing", work, tc.hooks)
				}
				return
			}
			if got == e {
				t.Fatal("edits returned unchanged")
			}
			if !reflect.DeepEqual(got.Hooks, tc.want) && (len(got.Hooks) != 0 || len(tc.want) != 0) {
				t.Errorf("hooks left:")
				for _, h := range got.Hooks {
					t.Errorf("  %+v", *h)
				}
			}
			if !reflect.DeepEqual(got.Env, e.Env) {
				t.Errorf("env %q changed", got.Env)
			}
			if !reflect.DeepEqual(work, tc.work) {
				t.Errorf("work\n got %+v\nwant %+v", work, tc.work)
			}
			if len(e.Hooks) != len(tc.hooks) {
				t.Error("input edits modified")
			}
		})
	}
}

func withEnv(h *cdispecs.Hook, env ...string) *cdispecs.Hook { h.Env = env; return h }

func withTimeout(h *cdispecs.Hook) *cdispecs.Hook {
	t := 5
	h.Timeout = &t
	return h
}
