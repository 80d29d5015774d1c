// Package ocispec loads, edits and atomically rewrites an OCI bundle's
// config.json.
//
// A Doc keeps the file as a generic JSON tree (objects, arrays, strings,
// exact number literals) and edits that tree in place, so every field the
// editor does not know — a newer runtime-spec field, a vendor extension deep
// inside linux.resources, an annotation — is written back with the same
// meaning. A typed *specs.Spec view of the fields nctk reads and edits is
// offered for reading (see Doc.Spec). Load is strict about what nctk uses:
// malformed JSON and a wrong type in a field nctk reads or edits are errors
// naming the file and the offset or field; the types of fields nctk neither
// reads nor edits are the low-level runtime's to check.
//
// Apply writes a plan (internal/plan) into the spec, with the
// createContainer hooks Hooks computes for it (internal/cdispec puts the
// same hooks in CDI specs); Save replaces the file atomically, keeping its
// mode and owner.
package ocispec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/nctk/nctk/internal/atomicfile"
	"github.com/nctk/nctk/internal/hostfile"
	"github.com/nctk/nctk/internal/jsonerr"
	"github.com/nctk/nctk/internal/ocistate"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// MaxSize bounds the config.json Load accepts (a real one is a few KiB);
// the hooks' ocistate.LoadRootPath reads it under the same bound.
const MaxSize = ocistate.MaxSpecSize

// object is a JSON object of the generic tree.
type object = map[string]any

// Doc is a loaded OCI runtime configuration.
type Doc struct {
	name string
	tree object
	// spec is the typed view (see Spec); nil after Apply until Spec is
	// called.
	spec *specs.Spec
	// cdi is the typed view of the fields the CDI library's editor reads
	// (cdiView's), decoded with spec from the same pass; nil when unknown
	// (after Apply, or when one of those fields did not decode: applyCDI
	// then decodes them itself and reports that).
	cdi *specs.Spec
	// data is tree's encoding when Apply made it (nil: encode on demand).
	data []byte
	// orig is what Load read (Parse decoded).
	orig []byte
}

// Load reads and decodes the config.json at path.
func Load(path string) (*Doc, error) {
	data, err := hostfile.ReadFile(path, MaxSize)
	if err != nil {
		return nil, fmt.Errorf("read OCI spec: %w", err)
	}
	return Parse(path, data)
}

// Parse decodes a config.json's content; name is used in error messages.
func Parse(name string, data []byte) (*Doc, error) {
	tree, err := decodeTree(data)
	if err != nil {
		return nil, fmt.Errorf("invalid OCI spec %s: %w", name, jsonerr.Describe(data, err))
	}
	spec, cdi, err := viewsOf(tree, func() ([]byte, error) { return data, nil })
	if err != nil {
		return nil, fmt.Errorf("invalid OCI spec %s: %w", name, jsonerr.Describe(data, err))
	}
	return &Doc{name: name, tree: tree, spec: spec, cdi: cdi, orig: data}, nil
}

// Original is the configuration as Load read it (Parse was given it),
// before any Apply: the caller must not change it.
func (d *Doc) Original() []byte { return d.orig }

// Spec is the typed view of the configuration, for reading. It holds the
// fields nctk reads and edits — ociVersion, process.env,
// process.capabilities, root, mounts, annotations, hooks, linux.devices,
// linux.resources.devices, linux.maskedPaths and linux.readonlyPaths — and
// nothing else (decode Bytes into a
// specs.Spec for the whole configuration). It reflects every Apply; changes
// made to it are not written back (edit through Apply).
func (d *Doc) Spec() *specs.Spec {
	if d.spec == nil {
		// After Apply, decoded from what it wrote: only values of the
		// fields' own types went into fields that decoded before, so this
		// cannot fail; were it to, the view holds what did decode.
		d.spec, d.cdi, _ = viewsOf(d.tree, d.Bytes)
		if d.spec == nil {
			data, _ := d.Bytes()
			d.spec, _ = decodeSpec(data)
		}
		if d.spec == nil {
			d.spec = &specs.Spec{}
		}
	}
	return d.spec
}

// Devices is linux.devices as the configuration holds it now, Apply's
// edits included: what Spec().Linux.Devices gives, without converting the
// rest of the document after an Apply.
func (d *Doc) Devices() []specs.LinuxDevice {
	if d.spec == nil {
		c := conv{ok: true}
		linux, _ := d.tree["linux"].(object)
		if devs := c.devices(linux["devices"]); c.ok {
			return devs
		}
	}
	if s := d.Spec(); s.Linux != nil {
		return s.Linux.Devices
	}
	return nil
}

// RootPath is the container's root directory: root.path, joined to bundle
// (the directory holding config.json) when relative, made absolute and
// clean. An unset root.path is an error naming the spec.
func (d *Doc) RootPath(bundle string) (string, error) {
	var p string
	if r := d.Spec().Root; r != nil {
		p = r.Path
	}
	return ocistate.RootPath(d.name, p, bundle)
}

// Bytes returns the JSON encoding of the document as Save writes it.
func (d *Doc) Bytes() ([]byte, error) {
	if d.data != nil {
		return d.data, nil
	}
	return encode(d.tree)
}

// Save writes doc to path atomically: the content goes to a temporary file
// in the same directory, which gets the mode and owner of the file it
// replaces (0644 and the caller's for a new file), and is renamed over
// path. On any error path is left as it was.
//
// There is no fsync: the rename already makes every reader see the old or
// the new spec, never a mix, and durability buys nothing here — engines keep
// bundles on tmpfs under /run, and a crash discards the container the spec
// describes. On a disk-backed bundle the two syncs cost 0.5–5 ms per
// container create.
func Save(path string, doc *Doc) error {
	data, err := doc.Bytes()
	if err != nil {
		return fmt.Errorf("write OCI spec %s: %w", path, err)
	}
	if err := atomicfile.WriteFile(path, data, atomicfile.Options{KeepExisting: true}); err != nil {
		return fmt.Errorf("write OCI spec %s: %w", path, err)
	}
	return nil
}

// decodeTree decodes data into the generic tree; numbers keep their literal.
func decodeTree(data []byte) (object, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty file")
		}
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, jsonerr.TrailingDataError{Offset: dec.InputOffset()}
	}
	obj, ok := v.(object)
	if !ok {
		return nil, fmt.Errorf("top level is %s, want a JSON object", jsonKind(v))
	}
	return obj, nil
}

// specView is the part of the runtime-spec that nctk reads or edits, with
// the runtime-spec's own types: decoding it checks those fields' types and
// costs a fraction of decoding a whole specs.Spec (encoding/json builds its
// per-type tables on first use, in every fresh process: ~0.5 ms for the
// whole spec on the development VM, on every container create).
type specView struct {
	Version     string            `json:"ociVersion"`
	Process     *processView      `json:"process,omitempty"`
	Root        *specs.Root       `json:"root,omitempty"`
	Mounts      []specs.Mount     `json:"mounts,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Hooks       *specs.Hooks      `json:"hooks,omitempty"`
	Linux       *linuxView        `json:"linux,omitempty"`
}

type processView struct {
	Env          []string                 `json:"env,omitempty"`
	Capabilities *specs.LinuxCapabilities `json:"capabilities,omitempty"`
}

type linuxView struct {
	Devices   []specs.LinuxDevice `json:"devices,omitempty"`
	Resources *struct {
		Devices []specs.LinuxDeviceCgroup `json:"devices,omitempty"`
	} `json:"resources,omitempty"`
	MaskedPaths   []string `json:"maskedPaths,omitempty"`
	ReadonlyPaths []string `json:"readonlyPaths,omitempty"`
}

// decodeSpec decodes the fields of specView from data into a specs.Spec,
// checking their types. Every other field is left zero (it stays in the
// generic tree).
func decodeSpec(data []byte) (*specs.Spec, error) {
	var v specView
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, err
	}
	return newSpec(v.Version, v.Root, v.Mounts, v.Annotations, v.Hooks, v.Process, v.Linux), nil
}

func newSpec(version string, root *specs.Root, mounts []specs.Mount, annotations map[string]string,
	hooks *specs.Hooks, proc *processView, linux *linuxView) *specs.Spec {
	s := &specs.Spec{Version: version, Root: root, Mounts: mounts, Annotations: annotations, Hooks: hooks}
	if proc != nil {
		s.Process = &specs.Process{Env: proc.Env, Capabilities: proc.Capabilities}
	}
	if linux != nil {
		s.Linux = &specs.Linux{Devices: linux.Devices, MaskedPaths: linux.MaskedPaths, ReadonlyPaths: linux.ReadonlyPaths}
		if linux.Resources != nil {
			s.Linux.Resources = &specs.LinuxResources{Devices: linux.Resources.Devices}
		}
	}
	return s
}

// fullView is specView and cdiView in one: what Parse decodes, in one
// pass over config.json.
type fullView struct {
	Version string `json:"ociVersion"`
	Process *struct {
		processView
		User specs.User `json:"user"`
	} `json:"process,omitempty"`
	Root        *specs.Root       `json:"root,omitempty"`
	Mounts      []specs.Mount     `json:"mounts,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Hooks       *specs.Hooks      `json:"hooks,omitempty"`
	Linux       *struct {
		linuxView
		NetDevices map[string]specs.LinuxNetDevice `json:"netDevices,omitempty"`
		IntelRdt   *specs.LinuxIntelRdt            `json:"intelRdt,omitempty"`
		Namespaces []specs.LinuxNamespace          `json:"namespaces,omitempty"`
	} `json:"linux,omitempty"`
}

// decodeViews decodes data's typed view (Doc.Spec) and the CDI editor's
// view (cdiView) in one pass. A field only the CDI editor reads that does
// not decode is no error here (config.json may have no CDI edits to
// apply): cdi is then nil, and applyCDI decodes and reports it.
func decodeViews(data []byte) (spec, cdi *specs.Spec, err error) {
	var v fullView
	if err := json.Unmarshal(data, &v); err != nil {
		spec, err := decodeSpec(data)
		return spec, nil, err
	}
	spec, cdi = views(&v)
	return spec, cdi, nil
}

// viewsOf is decodeViews for a document already decoded into tree (from
// data): converted from the tree (viewOfTree) when it can be, else decoded.
func viewsOf(tree object, data func() ([]byte, error)) (spec, cdi *specs.Spec, err error) {
	if v, ok := viewOfTree(tree); ok {
		spec, cdi = views(v)
		return spec, cdi, nil
	}
	b, err := data()
	if err != nil {
		return nil, nil, err
	}
	return decodeViews(b)
}

// views returns the typed view and the CDI editor's view of v.
func views(v *fullView) (spec, cdi *specs.Spec) {
	var proc *processView
	if v.Process != nil {
		proc = &v.Process.processView
	}
	var linux *linuxView
	if v.Linux != nil {
		linux = &v.Linux.linuxView
	}
	spec = newSpec(v.Version, v.Root, v.Mounts, v.Annotations, v.Hooks, proc, linux)
	// The CDI view shares nothing with spec: the editor works on a copy
	// (cloneForEdit), and spec's lists stay as decoded.
	cdi = &specs.Spec{Mounts: slices.Clone(v.Mounts), Hooks: cloneHooks(v.Hooks)}
	if v.Process != nil {
		cdi.Process = &specs.Process{Env: slices.Clone(v.Process.Env), User: v.Process.User}
	}
	if l := v.Linux; l != nil {
		cdi.Linux = &specs.Linux{Devices: slices.Clone(l.Devices), NetDevices: l.NetDevices, IntelRdt: l.IntelRdt, Namespaces: l.Namespaces}
		if l.Resources != nil {
			cdi.Linux.Resources = &specs.LinuxResources{Devices: slices.Clone(l.Resources.Devices)}
		}
	}
	return spec, cdi
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	case object:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}
