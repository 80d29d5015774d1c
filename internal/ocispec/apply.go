package ocispec

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	cdispecs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nctk/nctk/internal/hookargs"
	"github.com/nctk/nctk/internal/plan"
)

// legacyHookNames are the basenames of NVIDIA's prestart hook (Docker's
// --gpus inserts it); Apply removes it, since the plan replaces it.
func legacyHookNames() []string {
	return []string{"nvidia-container-runtime-hook", "nvidia-container-toolkit"}
}

// ownHookNames are the hook subcommands whose entries Apply replaces: those
// Hooks emits, and NVIDIA's disable-device-node-modification, which Apply
// does not emit (the mount-proc-driver view includes its params copy).
func ownHookNames() []string {
	return []string{hookargs.NameCreateSymlinks, hookargs.NameUpdateLdcache, hookargs.NameMountProcDriver,
		hookargs.NameDisableDeviceNodeModification}
}

// HookConfig says how Apply emits createContainer hooks.
type HookConfig struct {
	// Path is the absolute host path of the nvidia-cdi-hook binary.
	Path string
	// LdconfigPath is the host ldconfig update-ldcache runs (passed as
	// --ldconfig-path); empty leaves the hook's default.
	LdconfigPath string
	// InProcessLdcache passes update-ldcache the injected libraries and
	// their links (--lib), so that nctk's nvidia-cdi-hook updates
	// ld.so.cache in-process instead of running ldconfig. On in the CDI
	// specs nctk writes by default (cdispec.Options.SeparateHooks off);
	// nvidia-container-runtime emits no update-ldcache hook (RootfsDone).
	InProcessLdcache bool
	// RootfsDone says the caller has already created p.Symlinks and
	// updated ld.so.cache in the container root (nvidia-container-runtime
	// does it before the low-level runtime runs, see plan.Plan.LdcacheLibs):
	// no create-symlinks or update-ldcache hook is emitted.
	RootfsDone bool
	// NoProcView says the container's procfs has no /proc/driver/nvidia
	// (no driver loaded in the host kernel), so the mount-proc-driver hook
	// would skip the view: it is not emitted.
	NoProcView bool
	// AfterCreate says the caller makes the links below /dev and the
	// /proc/driver/nvidia view itself once the low-level runtime has
	// created the container (internal/aftercreate): no hook is emitted
	// for them.
	AfterCreate bool
	// Applied says p.CDI was applied to the document already (by the
	// engine, which then ran the runtime): of the edits, only their
	// createContainer hooks are written, replacing config.json's (the
	// caller has taken out those it does itself).
	Applied bool
	// EditCDI applies p.CDI's container edits to the typed view of
	// config.json (cdiedit.Apply, the CDI library's editor); needed when
	// p.CDI is not nil and not Applied.
	EditCDI CDIEditor
	// MountsAfterCreate are destinations (clean container paths) of p's
	// mounts and CDI mounts that the caller makes itself once the
	// low-level runtime has created the container: config.json does not
	// get them. No mount of the spec may be at, above or below one of
	// them (what config.json held there would be gone with it).
	MountsAfterCreate []string
}

// CDIEditor applies CDI container edits to a typed view of config.json's
// fields, in place (cdiedit.Apply).
type CDIEditor func(*specs.Spec, *cdispecs.ContainerEdits) error

// The hook stages CDI container edits name (cdi.PrestartHook, …).
const (
	hookPrestart        = "prestart"
	hookCreateRuntime   = "createRuntime"
	hookCreateContainer = "createContainer"
)

// Hook is one createContainer hook: Args is a hookargs command line
// (Args[0] is hookargs.Binary).
type Hook struct {
	Path string
	Args []string
	Env  []string
}

// Hooks returns the createContainer hooks that apply p inside the
// container root after the mounts: symlinks, then the ld.so.cache update,
// then the /proc/driver/nvidia view, each a call of hc.Path with
// hookargs.Env.
func Hooks(p *plan.Plan, hc HookConfig) []Hook {
	if p == nil {
		return nil
	}
	var hs []hookargs.Hook
	if h := SymlinksHook(p.Symlinks); h != nil && !hc.RootfsDone {
		hs = append(hs, *h)
	}
	if h := SymlinksHook(p.DevSymlinks); h != nil && !hc.AfterCreate {
		hs = append(hs, *h)
	}
	if len(p.LdconfigDirs) > 0 && !hc.RootfsDone {
		h := hookargs.UpdateLdcache{LdconfigPath: hc.LdconfigPath, Folders: p.LdconfigDirs}
		if hc.InProcessLdcache {
			h.Libs = p.LdcacheLibs()
		}
		hs = append(hs, h)
	}
	if v := p.Proc; v != nil && !hc.NoProcView && !hc.AfterCreate {
		hs = append(hs, hookargs.MountProcDriver{HostDir: v.HostDir, Files: v.Files, GPUs: v.GPUDirs, Expose: v.Expose})
	}
	hooks := make([]Hook, 0, len(hs))
	for _, h := range hs {
		hooks = append(hooks, Hook{Path: hc.Path, Args: hookargs.Command(h), Env: hookargs.Env()})
	}
	return hooks
}

// SymlinksHook is the create-symlinks hook that makes links (the plan's
// Symlinks, or its DevSymlinks in the container's /dev once the low-level
// runtime has set it up); nil for no link.
func SymlinksHook(links []plan.Symlink) *hookargs.CreateSymlinks {
	if len(links) == 0 {
		return nil
	}
	h := hookargs.CreateSymlinks{}
	for _, s := range links {
		h.Links = append(h.Links, hookargs.Link{Target: s.Target, Path: s.Link})
	}
	return &h
}

// Chain merges hooks that run the same binary with the same environment into
// one call, "nvidia-cdi-hook A ARGS ; B ARGS ; …" (hookargs.Chain), which
// nvidia-cdi-hook runs in order on one OCI state: one process per container
// instead of one per hook (each start of the binary costs milliseconds on
// the create path).
func Chain(hooks []Hook) []Hook {
	var out []Hook
	for _, h := range hooks {
		if n := len(out); n > 0 && out[n-1].Path == h.Path && slices.Equal(out[n-1].Env, h.Env) &&
			len(h.Args) > 0 && h.Args[0] == out[n-1].Args[0] {
			out[n-1].Args = hookargs.Chain(out[n-1].Args, h.Args)
			continue
		}
		h.Args = slices.Clone(h.Args)
		out = append(out, h)
	}
	return out
}

// Apply writes the plan p into doc:
//   - linux.devices: a char device entry (path, major, minor, fileMode, uid,
//     gid) per plan device, replacing an entry with the same path;
//   - linux.resources.devices: an allow rule (type c, major, minor, access
//     rw) for exactly those devices, unless the same rule is there;
//   - mounts: a bind mount per plan mount with the plan's options (files
//     ro,nosuid,nodev,rbind,rprivate; sockets writable), replacing a mount
//     with the same destination;
//   - process.env: the plan's variables, replacing the same keys;
//   - process.user.additionalGids: the plan's AdditionalGIDs that are not
//     there yet;
//   - hooks.createContainer: the hooks of Hooks(p, hc), replacing hooks of
//     the same subcommands Apply emitted before;
//   - hooks.prestart: NVIDIA's nvidia-container-runtime-hook removed, so the
//     container is not injected twice;
//   - then the plan's CDI container edits, with the CDI library's editor
//     that hc.EditCDI names (cdiedit.Apply; see applyCDI): exactly what an
//     engine's CDI support writes.
//
// Applying the same plan again leaves the document as it is, except for
// CDI edits, which follow the CDI library (a second application appends
// their cgroup rules and hooks again, as InjectDevices would). Every other
// field, known or not, is kept. A nil plan changes nothing. On error doc is
// unchanged.
func Apply(doc *Doc, p *plan.Plan, hc HookConfig) error {
	if p == nil {
		return nil
	}
	hooks := Chain(Hooks(p, hc))
	if err := validate(p, hooks, hc); err != nil {
		return fmt.Errorf("apply injection plan to %s: %w", doc.name, err)
	}
	tree, ok := deepCopy(doc.tree).(object)
	if !ok {
		return fmt.Errorf("apply injection plan to %s: document is not an object", doc.name)
	}
	if err := edit(tree, p, hooks, doc.cdi, hc); err != nil {
		return fmt.Errorf("apply injection plan to %s: %w", doc.name, err)
	}
	data, err := encode(tree)
	if err != nil {
		return fmt.Errorf("apply injection plan to %s: %w", doc.name, err)
	}
	// The typed views are decoded from data when asked for (Spec): the
	// runtime writes data and asks for none.
	doc.tree, doc.spec, doc.cdi, doc.data = tree, nil, nil, data
	return nil
}

// validate checks the plan before anything is edited.
func validate(p *plan.Plan, hooks []Hook, hc HookConfig) error {
	for _, d := range p.Devices {
		if err := checkAbs("device path", d.Path); err != nil {
			return err
		}
	}
	for _, m := range p.Mounts {
		if err := checkAbs("mount source", m.Source); err != nil {
			return err
		}
		if err := checkAbs("mount destination", m.Destination); err != nil {
			return err
		}
	}
	for _, d := range hc.MountsAfterCreate {
		if !path.IsAbs(d) || path.Clean(d) != d {
			return fmt.Errorf("mount made after the create %q: want a clean absolute path", d)
		}
	}
	for _, s := range p.Symlinks {
		if err := checkAbs("symlink", s.Link); err != nil {
			return err
		}
		if err := (hookargs.Link{Target: s.Target, Path: s.Link}).Check(); err != nil {
			return fmt.Errorf("symlink %q -> %q: %w", s.Link, s.Target, err)
		}
	}
	for _, d := range p.LdconfigDirs {
		if err := checkAbs("ldconfig directory", d); err != nil {
			return err
		}
	}
	if v := p.Proc; v != nil {
		if err := checkAbs("/proc/driver/nvidia host directory", v.HostDir); err != nil {
			return err
		}
		for _, n := range slices.Concat(v.Files, v.GPUDirs, v.Expose) {
			if n == "" || strings.HasPrefix(n, "/") || slices.Contains(strings.Split(n, "/"), "..") {
				return fmt.Errorf("/proc/driver/nvidia view entry %q: want a relative path with no \"..\" component", n)
			}
		}
	}
	for _, kv := range p.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return fmt.Errorf("environment entry %q: want KEY=VALUE", kv)
		}
	}
	if len(hooks) > 0 {
		if err := checkAbs("hook binary (nvidia-cdi-hook)", hc.Path); err != nil {
			return err
		}
	}
	return nil
}

func checkAbs(what, p string) error {
	if !path.IsAbs(p) || strings.ContainsRune(p, 0) {
		return fmt.Errorf("%s %q: want an absolute path", what, p)
	}
	if slices.Contains(strings.Split(p, "/"), "..") {
		return fmt.Errorf("%s %q: has a \"..\" component", what, p)
	}
	return nil
}

// edit applies the plan to the generic tree. view is the CDI editor's
// typed view of tree (Doc.cdi; nil: unknown), good for the CDI edits as long
// as the plan's other entries change nothing.
func edit(tree object, p *plan.Plan, hooks []Hook, view *specs.Spec, hc HookConfig) error {
	after, applied := hc.MountsAfterCreate, hc.Applied
	changed := len(p.Devices) > 0 || len(p.Mounts) > 0 || len(p.Env) > 0 || len(p.AdditionalGIDs) > 0
	if len(p.Devices) > 0 {
		linux, err := objectAt(tree, "linux", "linux")
		if err != nil {
			return err
		}
		devs, err := arrayAt(linux, "devices", "linux.devices")
		if err != nil {
			return err
		}
		res, err := objectAt(linux, "resources", "linux.resources")
		if err != nil {
			return err
		}
		rules, err := arrayAt(res, "devices", "linux.resources.devices")
		if err != nil {
			return err
		}
		for _, d := range p.Devices {
			devs = replaceOrAppend(devs, deviceEntry(d), func(o object) bool { return o["path"] == d.Path })
			rule := cgroupRule(d)
			if !slices.ContainsFunc(rules, func(v any) bool { return sameRule(v, rule) }) {
				rules = append(rules, rule)
			}
		}
		linux["devices"] = devs
		res["devices"] = rules
	}

	if len(p.Mounts) > 0 {
		mounts, err := arrayAt(tree, "mounts", "mounts")
		if err != nil {
			return err
		}
		for _, m := range p.Mounts {
			entry := mountEntry(m)
			dst := path.Clean(m.Destination)
			sameDst := func(v any) bool {
				o, ok := v.(object)
				s, _ := o["destination"].(string)
				return ok && path.Clean(s) == dst
			}
			if i := slices.IndexFunc(mounts, sameDst); i >= 0 && equalJSON(mounts[i], entry) {
				continue
			}
			mounts = slices.DeleteFunc(mounts, sameDst)
			mounts = append(mounts, entry)
		}
		tree["mounts"] = mounts
	}

	if len(p.Env) > 0 {
		proc, ok := tree["process"].(object)
		if !ok {
			return errors.New("the spec has no process to add environment variables to")
		}
		env, err := arrayAt(proc, "env", "process.env")
		if err != nil {
			return err
		}
		for _, kv := range p.Env {
			key, _, _ := strings.Cut(kv, "=")
			env = slices.DeleteFunc(env, func(v any) bool {
				s, _ := v.(string)
				k, _, _ := strings.Cut(s, "=")
				return k == key
			})
			env = append(env, kv)
		}
		proc["env"] = env
	}

	if len(p.AdditionalGIDs) > 0 {
		if err := addGIDs(tree, p.AdditionalGIDs); err != nil {
			return err
		}
	}

	if p.CDI != nil && applied {
		// The edits are in: their createContainer hooks replace the
		// document's, before Apply's own are added.
		if err := replaceCreateContainer(tree, p.CDI.Hooks); err != nil {
			return err
		}
	}
	hooksChanged, err := editHooks(tree, hooks)
	if err != nil {
		return err
	}
	if p.CDI != nil && !applied {
		if changed || hooksChanged {
			view = nil
		}
		if err := applyCDI(tree, p.CDI, view, hc.EditCDI); err != nil {
			return err
		}
	}
	return dropMounts(tree, after)
}

// replaceCreateContainer sets tree's createContainer hooks to hooks' of
// that stage. An entry equal to one tree had is that one, unknown fields
// and all.
func replaceCreateContainer(tree object, hooks []*cdispecs.Hook) error {
	var was []any
	if ho, ok := tree["hooks"].(object); ok {
		old, _ := ho["createContainer"].([]any)
		was = slices.Clone(old) // matched entries are taken out
	}
	var cc []any
	for _, h := range hooks {
		if h == nil || h.HookName != hookCreateContainer {
			continue
		}
		if i := slices.IndexFunc(was, func(v any) bool { return sameHook(v, h) }); i >= 0 {
			cc = append(cc, was[i])
			was = slices.Delete(was, i, i+1)
			continue
		}
		o, err := genericHook(specs.Hook{Path: h.Path, Args: h.Args, Env: h.Env, Timeout: h.Timeout})
		if err != nil {
			return fmt.Errorf("hooks.createContainer: %w", err)
		}
		cc = append(cc, o)
	}
	ho, ok := tree["hooks"].(object)
	if !ok {
		if len(cc) == 0 {
			return nil
		}
		if tree["hooks"] != nil {
			return fmt.Errorf("hooks is %s, want an object", jsonKind(tree["hooks"]))
		}
		ho = object{}
		tree["hooks"] = ho
	}
	if len(cc) == 0 {
		delete(ho, "createContainer")
		if len(ho) == 0 {
			delete(tree, "hooks")
		}
		return nil
	}
	ho["createContainer"] = cc
	return nil
}

// genericHook is h's generic form, as the CDI editor's hooks are written
// (genericOf; encoding/json for strings that are not valid UTF-8).
func genericHook(h specs.Hook) (any, error) {
	if out, ok := genericOf([]specs.Hook{h}); ok {
		return out[0], nil
	}
	g, err := toGeneric([]specs.Hook{h})
	if err != nil {
		return nil, err
	}
	if a, ok := g.([]any); ok && len(a) == 1 {
		return a[0], nil
	}
	return nil, fmt.Errorf("hook %s does not encode as one entry", h.Path)
}

// sameHook reports whether the generic hook entry v is h (path, args, env,
// timeout).
func sameHook(v any, h *cdispecs.Hook) bool {
	o, ok := v.(object)
	if !ok || o["path"] != h.Path {
		return false
	}
	args, ok1 := anyStrings(o["args"])
	env, ok2 := anyStrings(o["env"])
	if !ok1 || !ok2 || !slices.Equal(args, h.Args) || !slices.Equal(env, h.Env) {
		return false
	}
	t, has := o["timeout"]
	if h.Timeout == nil {
		return !has
	}
	return has && sameNumber(t, num(int64(*h.Timeout)))
}

// dropMounts removes the mounts at the destinations in after from tree.
func dropMounts(tree object, after []string) error {
	if len(after) == 0 {
		return nil
	}
	mounts, err := arrayAt(tree, "mounts", "mounts")
	if err != nil {
		return err
	}
	tree["mounts"] = slices.DeleteFunc(mounts, func(v any) bool {
		o, _ := v.(object)
		d, _ := o["destination"].(string)
		return o != nil && slices.Contains(after, path.Clean(d))
	})
	return nil
}

// CreateHooks are the hooks that config.json runs during the create
// (prestart, createRuntime, createContainer) once Apply has edited spec
// with p and hc: spec's own, less those Apply removes (NVIDIA's legacy
// prestart hook, the hooks an earlier Apply emitted, and with hc.Applied
// its createContainer hooks, which p's replace), then Apply's and those of
// p's CDI edits.
func CreateHooks(spec *specs.Spec, p *plan.Plan, hc HookConfig) []specs.Hook {
	var out []specs.Hook
	if h := spec.Hooks; h != nil {
		//lint:ignore SA1019 engines still write prestart hooks.
		for _, x := range h.Prestart {
			if !slices.Contains(legacyHookNames(), path.Base(x.Path)) {
				out = append(out, x)
			}
		}
		out = append(out, h.CreateRuntime...)
		for _, x := range h.CreateContainer {
			if !ownHook(x.Args, x.Env) && (!hc.Applied || p.CDI == nil) { // Applied: p.CDI's replace them
				out = append(out, x)
			}
		}
	}
	for _, x := range Hooks(p, hc) {
		out = append(out, specs.Hook{Path: x.Path, Args: x.Args, Env: x.Env})
	}
	if p.CDI != nil {
		for _, x := range p.CDI.Hooks {
			if x != nil && slices.Contains([]string{hookPrestart, hookCreateRuntime, hookCreateContainer}, x.HookName) {
				out = append(out, specs.Hook{Path: x.Path, Args: x.Args, Env: x.Env})
			}
		}
	}
	return out
}

// addGIDs appends to process.user.additionalGids each of gids it does not
// hold yet.
func addGIDs(tree object, gids []uint32) error {
	proc, ok := tree["process"].(object)
	if !ok {
		return errors.New("the spec has no process to add supplementary groups to")
	}
	user, err := objectAt(proc, "user", "process.user")
	if err != nil {
		return err
	}
	list, err := arrayAt(user, "additionalGids", "process.user.additionalGids")
	if err != nil {
		return err
	}
	for _, g := range gids {
		n := num(int64(g))
		if !slices.ContainsFunc(list, func(v any) bool { return sameNumber(v, n) }) {
			list = append(list, n)
		}
	}
	user["additionalGids"] = list
	return nil
}

// editHooks removes NVIDIA's prestart hook and hooks Apply emitted before,
// then appends hooks. It reports whether it changed tree.
func editHooks(tree object, hooks []Hook) (bool, error) {
	hv, present := tree["hooks"]
	if !present || hv == nil {
		if len(hooks) == 0 {
			return false, nil
		}
		hv = object{}
		tree["hooks"] = hv
	}
	ho, ok := hv.(object)
	if !ok {
		return false, fmt.Errorf("hooks is %s, want an object", jsonKind(hv))
	}
	changed := len(hooks) > 0
	if pre, ok := ho["prestart"].([]any); ok {
		kept := slices.DeleteFunc(slices.Clone(pre), isLegacyHook)
		switch {
		case len(kept) == len(pre):
		case len(kept) == 0:
			delete(ho, "prestart")
			changed = true
		default:
			ho["prestart"] = kept
			changed = true
		}
	}
	cc, err := arrayAt(ho, "createContainer", "hooks.createContainer")
	if err != nil {
		return false, err
	}
	n := len(cc)
	cc = slices.DeleteFunc(cc, isOwnHook)
	changed = changed || len(cc) != n
	for _, h := range hooks {
		cc = append(cc, object{"path": h.Path, "args": strings2any(h.Args), "env": strings2any(h.Env)})
	}
	if len(cc) == 0 {
		if _, ok := ho["createContainer"]; ok {
			delete(ho, "createContainer")
			changed = true
		}
	} else {
		ho["createContainer"] = cc
	}
	if len(ho) == 0 {
		delete(tree, "hooks")
		changed = true
	}
	return changed, nil
}

// isLegacyHook reports whether a prestart hook entry runs NVIDIA's
// nvidia-container-runtime-hook.
func isLegacyHook(v any) bool {
	o, ok := v.(object)
	if !ok {
		return false
	}
	p, _ := o["path"].(string)
	return slices.Contains(legacyHookNames(), path.Base(p))
}

// isOwnHook reports whether a createContainer hook entry is one Apply
// emits: nvidia-cdi-hook with one of Apply's subcommands and exactly
// hookargs.Env as its environment (hooks from CDI specs carry another env and
// are left alone).
func isOwnHook(v any) bool {
	o, ok := v.(object)
	if !ok {
		return false
	}
	args, ok := anyStrings(o["args"])
	if !ok {
		return false
	}
	env, ok := anyStrings(o["env"])
	return ok && ownHook(args, env)
}

// anyStrings is v as a list of strings; false when it is not one (nil is
// the empty list).
func anyStrings(v any) ([]string, bool) {
	if v == nil {
		return nil, true
	}
	l, ok := v.([]any)
	if !ok {
		return nil, false
	}
	out := make([]string, len(l))
	for i, x := range l {
		if out[i], ok = x.(string); !ok {
			return nil, false
		}
	}
	return out, true
}

// ownHook is isOwnHook for an entry's args and env.
func ownHook(args, env []string) bool {
	return len(args) >= 2 && args[0] == hookargs.Binary && slices.Contains(ownHookNames(), args[1]) && slices.Equal(env, hookargs.Env())
}

func deviceEntry(d plan.Device) object {
	e := object{
		"path":  d.Path,
		"type":  "c",
		"major": num(int64(d.Major)),
		"minor": num(int64(d.Minor)),
		"uid":   num(int64(d.UID)),
		"gid":   num(int64(d.GID)),
	}
	if d.FileMode != 0 {
		e["fileMode"] = num(int64(d.FileMode & 0o7777))
	}
	return e
}

func cgroupRule(d plan.Device) object {
	return object{"allow": true, "type": "c", "major": num(int64(d.Major)), "minor": num(int64(d.Minor)), "access": "rw"}
}

// sameRule reports whether an existing cgroup rule is rule.
func sameRule(v any, rule object) bool {
	o, ok := v.(object)
	if !ok {
		return false
	}
	return o["allow"] == true && o["type"] == "c" && o["access"] == "rw" &&
		sameNumber(o["major"], rule["major"]) && sameNumber(o["minor"], rule["minor"])
}

func mountEntry(m plan.Mount) object {
	opts := m.Options
	if len(opts) == 0 {
		opts = defaultMountOptions(m.Kind)
	}
	return object{"destination": m.Destination, "type": "bind", "source": m.Source, "options": strings2any(opts)}
}

// defaultMountOptions are used for a plan mount without options: read-only
// for files and directories, writable (but noexec) for sockets.
func defaultMountOptions(k plan.MountKind) []string {
	if k == plan.KindSocket {
		return []string{plan.OptNoSuid, plan.OptNoDev, plan.OptNoExec, plan.OptRBind, plan.OptRPrivate}
	}
	return []string{plan.OptRO, plan.OptNoSuid, plan.OptNoDev, plan.OptRBind, plan.OptRPrivate}
}

// replaceOrAppend replaces the first object matching with entry (removing
// further matches) or appends entry.
func replaceOrAppend(arr []any, entry object, match func(object) bool) []any {
	found := false
	out := arr[:0:0]
	for _, v := range arr {
		if o, ok := v.(object); ok && match(o) {
			if !found {
				out = append(out, entry)
				found = true
			}
			continue
		}
		out = append(out, v)
	}
	if !found {
		out = append(out, entry)
	}
	return out
}

// objectAt returns parent[key] as an object, creating it when absent or
// null.
func objectAt(parent object, key, name string) (object, error) {
	v, ok := parent[key]
	if !ok || v == nil {
		o := object{}
		parent[key] = o
		return o, nil
	}
	o, ok := v.(object)
	if !ok {
		return nil, fmt.Errorf("%s is %s, want an object", name, jsonKind(v))
	}
	return o, nil
}

// arrayAt returns parent[key] as an array (nil when absent or null).
func arrayAt(parent object, key, name string) ([]any, error) {
	v, ok := parent[key]
	if !ok || v == nil {
		return nil, nil
	}
	a, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%s is %s, want an array", name, jsonKind(v))
	}
	return a, nil
}

func num(n int64) json.Number { return json.Number(strconv.FormatInt(n, 10)) }

// sameNumber compares two JSON numbers by value.
func sameNumber(a, b any) bool {
	x, ok1 := a.(json.Number)
	y, ok2 := b.(json.Number)
	if !ok1 || !ok2 {
		return false
	}
	if x == y {
		return true
	}
	i, err1 := x.Int64()
	j, err2 := y.Int64()
	return err1 == nil && err2 == nil && i == j
}

func strings2any(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// equalJSON compares two generic values.
func equalJSON(a, b any) bool {
	switch x := a.(type) {
	case object:
		y, ok := b.(object)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			w, ok := y[k]
			if !ok || !equalJSON(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !equalJSON(x[i], y[i]) {
				return false
			}
		}
		return true
	case json.Number:
		return sameNumber(a, b)
	default:
		return a == b
	}
}

// deepCopy copies a generic tree.
func deepCopy(v any) any {
	switch x := v.(type) {
	case object:
		o := make(object, len(x))
		for k, e := range x {
			o[k] = deepCopy(e)
		}
		return o
	case []any:
		a := make([]any, len(x))
		for i, e := range x {
			a[i] = deepCopy(e)
		}
		return a
	default:
		return v
	}
}
