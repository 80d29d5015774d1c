package doctor

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/nctk/nctk/internal/fixture"
	"github.com/nctk/nctk/internal/ocispec"
)

// tent is an entry of a tar the tests write.
type tent struct {
	name string
	typ  byte // tar.TypeReg when 0
	body string
	link string
}

// tarOf writes a tar of the entries, in order.
func tarOf(t *testing.T, entries ...tent) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: 0o755, Format: tar.FormatPAX}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func gz(t *testing.T, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	z := gzip.NewWriter(&buf)
	if _, err := z.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func sha(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Archive layouts the tests write.
const (
	layoutDockerSave = "docker-save"
	layoutOCI        = "oci" // gzip layers, a nested index
)

// imageArchive writes an image archive of the layout with the config and
// the layers (plain tars).
func imageArchive(t *testing.T, layout string, cfg imageConfig, layers ...[]byte) []byte {
	t.Helper()
	config := mustJSON(t, map[string]any{"architecture": "amd64", "os": "linux", "config": cfg})
	var members []tent
	switch layout {
	case layoutDockerSave:
		var names []string
		for i, l := range layers {
			n := "l" + string(rune('a'+i)) + "/layer.tar"
			names = append(names, n)
			members = append(members, tent{name: n, body: string(l)})
		}
		members = append(members, tent{name: sha(config) + ".json", body: string(config)},
			tent{name: "manifest.json", body: string(mustJSON(t, []map[string]any{{"Config": sha(config) + ".json", "RepoTags": []string{"t:latest"}, "Layers": names}}))})
	case layoutOCI:
		blob := func(data []byte, mt string) map[string]any {
			members = append(members, tent{name: "blobs/sha256/" + sha(data), body: string(data)})
			return map[string]any{"mediaType": mt, "digest": "sha256:" + sha(data), "size": len(data)}
		}
		var ls []map[string]any
		for _, l := range layers {
			ls = append(ls, blob(gz(t, l), "application/vnd.oci.image.layer.v1.tar+gzip"))
		}
		manifest := blob(mustJSON(t, map[string]any{"schemaVersion": 2, "config": blob(config, "application/vnd.oci.image.config.v1+json"), "layers": ls}),
			"application/vnd.oci.image.manifest.v1+json")
		manifest["platform"] = map[string]string{"os": "linux", "architecture": "amd64"}
		other := blob([]byte(`{"schemaVersion":2,"config":{"digest":"sha256:`+strings.Repeat("0", 64)+`"},"layers":[]}`), "application/vnd.oci.image.manifest.v1+json")
		other["platform"] = map[string]string{"os": "linux", "architecture": "s390x"}
		inner := blob(mustJSON(t, map[string]any{"schemaVersion": 2, "manifests": []any{other, manifest}}), "application/vnd.oci.image.index.v1+json")
		members = append(members, tent{name: "oci-layout", body: `{"imageLayoutVersion":"1.0.0"}`},
			tent{name: "index.json", body: string(mustJSON(t, map[string]any{"schemaVersion": 2, "manifests": []any{inner}}))})
	default:
		t.Fatalf("layout %q", layout)
	}
	return tarOf(t, members...)
}

// elfStub is a small ELF with GPU code for sm_80.
func elfStub(t *testing.T) string { return string(elfBytes(t, makeFatbin(FatbinEntry{Arch: 80}))) }

// TestImageArchive reads images of both layouts with whiteouts, links and
// hostile entries, and checks the merged tree and the kept content.
func TestImageArchive(t *testing.T) {
	elf := elfStub(t)
	base := tarOf(t,
		tent{name: "usr/", typ: tar.TypeDir}, tent{name: "usr/lib/", typ: tar.TypeDir},
		tent{name: "lib", typ: tar.TypeSymlink, link: "usr/lib"},
		tent{name: "usr/lib/libcuda.so.470.82.01", body: "x"},
		tent{name: "opt/old/gone", body: "x"},
		tent{name: "opt/keep/lower", body: "x"},
		tent{name: "opt/keep/sub/deep", body: "x"},
		tent{name: "usr/local/bin/app", body: elf},
		tent{name: "etc/ld.so.cache", body: "not a cache"},
		tent{name: "./bin/tool", body: "v1"},
	)
	top := tarOf(t,
		tent{name: "opt/keep/upper", body: "y"}, // written before the opaque marker: stays
		tent{name: "opt/keep/.wh..wh..opq"},
		tent{name: "opt/.wh.old"},
		tent{name: "usr/lib/.wh.libcuda.so.470.82.01"},
		tent{name: "../../escape", body: "evil"},
		tent{name: "a/../../escape2", body: "evil"},
		tent{name: "/abs/file", body: "abs"},
		tent{name: "loop1", typ: tar.TypeSymlink, link: "loop2"},
		tent{name: "loop2", typ: tar.TypeSymlink, link: "/loop1"},
		tent{name: "up", typ: tar.TypeSymlink, link: "../../../../usr/local/bin/app"},
		tent{name: "hard", typ: tar.TypeLink, link: "usr/local/bin/app"},
		tent{name: "hard-missing", typ: tar.TypeLink, link: "no/such"},
		tent{name: "bin/tool", body: "v2"},
		tent{name: "dev/fifo", typ: tar.TypeFifo},
		tent{name: "lib/via-link", body: "z"}, // lib is a link to usr/lib
	)
	cfg := imageConfig{Env: []string{"A=1"}, Entrypoint: []string{"/usr/local/bin/app"}, Cmd: []string{"--x"}, WorkingDir: "/w"}
	for _, layout := range []string{layoutDockerSave, layoutOCI} {
		t.Run(layout, func(t *testing.T) {
			im, err := readImageArchive(bytes.NewReader(imageArchive(t, layout, cfg, base, top)), func(*image) []keepFile {
				return []keepFile{{"/up", 1 << 20}, {"/hard", 1 << 20}, {"/bin/tool", 1 << 20}, {"/lib/nothing", 1 << 20}, {"/abs/file", 2}}
			})
			if err != nil {
				t.Fatal(err)
			}
			defer im.close()
			if !reflect.DeepEqual(im.config, cfg) {
				t.Errorf("config %+v, want %+v", im.config, cfg)
			}
			x := im.files
			for p, want := range map[string]bool{
				"/opt/keep/upper": true, "/opt/keep/lower": false, "/opt/keep/sub/deep": false, "/opt/old/gone": false, "/opt/old": false,
				"/usr/lib/libcuda.so.470.82.01": false, "/lib/libcuda.so.470.82.01": false, "/escape": false, "/escape2": false,
				"/abs/file": true, "/usr/lib/via-link": true, "/loop1": false, "/up": true, "/hard": true, "/hard-missing": false, "/usr/local/bin/app": true,
			} {
				if _, _, ok := x.stat(p); ok != want {
					t.Errorf("stat(%s) exists = %v, want %v", p, ok, want)
				}
			}
			if e := x.entries["/lib"]; e == nil || e.kind != kindSymlink {
				t.Errorf("/lib is no longer a link: %+v", e)
			}
			if real, regular, _ := x.stat("/up"); real != "/usr/local/bin/app" || !regular {
				t.Errorf("/up resolves to %q (regular %v)", real, regular)
			}
			if x.skipped != 3 {
				t.Errorf("skipped %d entries, want 3 (two .. names, a dangling hard link)", x.skipped)
			}
			if got := glob(x, "/opt/keep/*", false); !reflect.DeepEqual(got, []string{"/opt/keep/upper"}) {
				t.Errorf("/opt/keep holds %v", got)
			}
			if got := glob(x, "/dev/*", true); got != nil {
				t.Errorf("regular files in /dev: %v", got)
			}
			// Kept: the hard link's and the symlink's target, the newer
			// /bin/tool; not kept: the ld.so.cache nobody asked for.
			for p, want := range map[string]string{"/hard": elf, "/up": elf, "/bin/tool": "v2"} {
				data, err := readAll(x, p, 1<<20)
				if err != nil || string(data) != want {
					t.Errorf("read %s: %d bytes, %v", p, len(data), err)
				}
			}
			for _, p := range []string{"/etc/ld.so.cache", "/abs/file"} { // not asked for; over its limit
				if _, err := readAll(x, p, 1<<20); err == nil || !strings.Contains(err.Error(), errNotKept.Error()) {
					t.Errorf("%s read without being kept: %v", p, err)
				}
			}
			if entries, err := fileFatbin(x, "/up"); err != nil || !reflect.DeepEqual(entries, []FatbinEntry{{Arch: 80}}) {
				t.Errorf("fatbin of /up: %v, %v", entries, err)
			}
		})
	}
}

// TestImageArchiveErrors: archives that cannot be read are refused with
// an error naming why.
func TestImageArchiveErrors(t *testing.T) {
	layer := tarOf(t, tent{name: "a", body: "x"})
	cfg := string(mustJSON(t, map[string]any{"config": imageConfig{}}))
	corrupt := bytes.Clone(layer)
	corrupt[150] ^= 0xff // the header checksum
	zstd := append([]byte{0x28, 0xb5, 0x2f, 0xfd}, make([]byte, 32)...)
	deep := []tent{}
	for i := 0; i <= maxIndexDepth+1; i++ {
		next := "blobs/sha256/" + strings.Repeat(string(rune('a'+i%6)), 64)
		name := "index.json"
		if i > 0 {
			name = "blobs/sha256/" + strings.Repeat(string(rune('a'+(i-1)%6)), 64)
		}
		deep = append(deep, tent{name: name, body: `{"manifests":[{"digest":"sha256:` + strings.TrimPrefix(next, "blobs/sha256/") + `"}]}`})
	}
	for _, tc := range []struct {
		name    string
		archive []byte
		want    string
	}{
		{"not a tar", []byte(strings.Repeat("garbage!", 200)), "image archive"},
		{"no manifest", tarOf(t, tent{name: "x", body: "y"}), "no index.json"},
		{"empty manifest", tarOf(t, tent{name: "manifest.json", body: "[]"}), "lists no image"},
		{"bad JSON", tarOf(t, tent{name: "manifest.json", body: "[{"}), "manifest.json"},
		{"missing layer", tarOf(t, tent{name: "c.json", body: cfg}, tent{name: "manifest.json", body: `[{"Config":"c.json","Layers":["nope.tar"]}]`}), "no nope.tar"},
		{"zstd layer", tarOf(t, tent{name: "c.json", body: cfg}, tent{name: "l.tar", body: string(zstd)},
			tent{name: "manifest.json", body: `[{"Config":"c.json","Layers":["l.tar"]}]`}), "zstd"},
		{"digest with a path", tarOf(t, tent{name: "index.json", body: `{"manifests":[{"digest":"sha256:../../etc/passwd"}]}`}), "invalid digest"},
		{"indexes too deep", tarOf(t, deep...), "nested deeper"},
		{"corrupt layer", tarOf(t, tent{name: "c.json", body: cfg}, tent{name: "l.tar", body: string(corrupt)},
			tent{name: "manifest.json", body: `[{"Config":"c.json","Layers":["l.tar"]}]`}), "layer l.tar"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			im, err := readImageArchive(bytes.NewReader(tc.archive), func(*image) []keepFile { return nil })
			if err == nil {
				im.close()
				t.Fatal("read without error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q lacks %q", err, tc.want)
			}
		})
	}
	// An archive larger than the bound is refused while spooling.
	if _, err := spool(bytes.NewReader(make([]byte, 4096)), 1024); err == nil || !strings.Contains(err.Error(), "too large") {
		t.Errorf("oversized archive: %v", err)
	}
}

// TestImageIndexBounds: link chains, long names and the entry count are
// bounded.
func TestImageIndexBounds(t *testing.T) {
	x := newImageIndex()
	// A chain of maxSymlinkHops links resolves; one more does not.
	for i := 0; i <= maxSymlinkHops; i++ {
		x.put("/l"+strconv.Itoa(i), &imageEntry{kind: kindSymlink, target: "/l" + strconv.Itoa(i+1)})
	}
	x.put("/l"+strconv.Itoa(maxSymlinkHops+1), &imageEntry{kind: kindRegular})
	if _, _, ok := x.stat("/l1"); !ok {
		t.Error("a chain of 40 links does not resolve")
	}
	if _, _, ok := x.stat("/l0"); ok {
		t.Error("a chain of 41 links resolves")
	}
	if _, ok := cleanTarName(strings.Repeat("a/", maxImagePath)); ok {
		t.Error("over-long name accepted")
	}
	if _, ok := cleanTarName("a\x00b"); ok {
		t.Error("name with NUL accepted")
	}
	many := make([]tent, 0, 10)
	for i := 0; i < 10; i++ {
		many = append(many, tent{name: "f" + strconv.Itoa(i)})
	}
	a, err := spool(bytes.NewReader(imageArchive(t, layoutDockerSave, imageConfig{}, tarOf(t, many...))), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer a.f.Close()
	_, layers, err := a.layout()
	if err != nil {
		t.Fatal(err)
	}
	x = newImageIndex()
	x.count = maxImageEntries - 5
	if err := a.applyLayer(x, 0, layers[0]); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Errorf("entry bound: %v", err)
	}
}

// fakeDocker writes a docker client (which serves as a podman client
// too) that knows one image (name) and streams archive for `image save`;
// it returns the PATH to use.
func fakeDocker(t *testing.T, name string, archive []byte) string {
	t.Helper()
	dir := t.TempDir()
	arch := filepath.Join(dir, "image.tar")
	if err := os.WriteFile(arch, archive, 0o644); err != nil {
		t.Fatal(err)
	}
	cat, err := exec.LookPath("cat")
	if err != nil {
		t.Skip("no cat on PATH")
	}
	script := `#!/bin/sh
last=""; for a in "$@"; do last="$a"; done
[ "$last" = "` + name + `" ] || { echo "Error: No such image: $last" >&2; exit 1; }
case "$1 $2" in
"image inspect"|"image exists") echo sha256:1234 ;;
"image save") exec ` + cat + ` ` + arch + ` ;;
*) echo "unexpected: $*" >&2; exit 2 ;;
esac
`
	// Written by another process: a file this process held open for
	// writing could still be open in a child another test forked meanwhile
	// (until that child's exec), and running it would fail with ETXTBSY.
	tmp := filepath.Join(dir, "docker.in")
	if err := os.WriteFile(tmp, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", tmp, filepath.Join(dir, "docker")).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	return dir
}

// asImage turns the bundle o.Bundle into an image of the layout (its
// rootfs one layer, its process the image config) served by a stand-in
// docker client, and points o at the image instead.
func asImage(t *testing.T, o *Options, layout string) {
	t.Helper()
	doc, err := ocispec.Load(filepath.Join(o.Bundle, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	rootfs, err := doc.RootPath(o.Bundle)
	if err != nil {
		t.Fatal(err)
	}
	var entries []tent
	err = filepath.WalkDir(rootfs, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == rootfs {
			return err
		}
		rel, _ := filepath.Rel(rootfs, p)
		switch {
		case d.IsDir():
			entries = append(entries, tent{name: rel + "/", typ: tar.TypeDir})
		case d.Type()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			entries = append(entries, tent{name: rel, typ: tar.TypeSymlink, link: l})
		default:
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			entries = append(entries, tent{name: rel, body: string(data)})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	s := doc.Spec()
	cfg := imageConfig{Env: s.Process.Env, Cmd: s.Process.Args, WorkingDir: s.Process.Cwd}
	const name = "nctk-test/image:1"
	bin := fakeDocker(t, name, imageArchive(t, layout, cfg, tarOf(t, entries...)))
	o.Bundle, o.Image, o.Environ = "", name, []string{"PATH=" + bin}
}

// TestImageFromEngine reads images through stand-in engine clients: the
// engine that knows the image is used, --engine limits the engines
// asked, and a client that fails or streams garbage is a
// container.request error naming why.
func TestImageFromEngine(t *testing.T) {
	r := fixture.Build(t, fixture.Spec{GPUs: 1})
	layer := tarOf(t, tent{name: "lib/ld-musl-x86_64.so.1", body: "x"})
	good := imageArchive(t, layoutDockerSave, imageConfig{Env: []string{"NVIDIA_VISIBLE_DEVICES=all"}}, layer)
	client := func(t *testing.T, name, script string) string {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+script), 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	for _, tc := range []struct {
		name    string
		path    func(t *testing.T) string
		engines []string
		check   string
		problem string
	}{
		{"docker knows it", func(t *testing.T) string { return fakeDocker(t, "img", good) }, nil, "container.libc", "musl"},
		{"podman knows it", func(t *testing.T) string {
			dir := fakeDocker(t, "img", good)
			if err := os.Rename(filepath.Join(dir, "docker"), filepath.Join(dir, "podman")); err != nil {
				t.Fatal(err)
			}
			return dir
		}, nil, "container.libc", "musl"},
		{"nobody knows it", func(t *testing.T) string {
			dir := fakeDocker(t, "other", good)
			if err := os.Link(filepath.Join(dir, "docker"), filepath.Join(dir, "podman")); err != nil {
				t.Fatal(err)
			}
			return dir
		}, nil, "container.request", "no engine knows it (docker: Error: No such image: img; podman: Error: No such image: img; containerd (namespace k8s.io): ctr not found on PATH"},
		{"containerd knows it, in namespace default", func(t *testing.T) string {
			dir := t.TempDir()
			arch := filepath.Join(dir, "oci.tar")
			if err := os.WriteFile(arch, imageArchive(t, layoutOCI, imageConfig{Env: []string{"NVIDIA_VISIBLE_DEVICES=all"}}, layer), 0o644); err != nil {
				t.Fatal(err)
			}
			cat, err := exec.LookPath("cat")
			if err != nil {
				t.Skip("no cat on PATH")
			}
			const ref = "docker.io/library/img:latest"
			return client(t, "ctr", `[ "$2" = default ] || exit 0
case "$4" in
ls) [ "$6" = "name==`+ref+`" ] && echo `+ref+`; exit 0 ;;
export) [ "$5 $6" = "- `+ref+`" ] && exec `+cat+` `+arch+`; exit 1 ;;
esac
exit 2
`)
		}, nil, "container.libc", "musl"},
		{"engine limited", func(t *testing.T) string { return fakeDocker(t, "img", good) }, []string{"podman"}, "container.request", "podman not found on PATH"},
		{"garbage stream", func(t *testing.T) string { return fakeDocker(t, "img", []byte("garbage")) }, nil, "container.request", "image archive"},
		{"client fails", func(t *testing.T) string {
			return client(t, "docker", "[ \"$2\" = save ] && { echo 'permission denied while trying to connect' >&2; exit 1; }\nexit 0\n")
		}, nil, "container.request", "permission denied while trying to connect"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{Image: "img", Environ: []string{"PATH=" + tc.path(t)}, Engines: tc.engines}
			rep := run(t, r, o)
			var ok bool
			for _, f := range find(rep, tc.check) {
				ok = ok || strings.Contains(f.Problem, tc.problem)
			}
			if !ok {
				t.Fatalf("no %s finding %q:\n%s", tc.check, tc.problem, dump(rep))
			}
		})
	}
}

func TestFullImageName(t *testing.T) {
	for in, want := range map[string]string{
		"ubuntu":                         "docker.io/library/ubuntu:latest",
		"ubuntu:22.04":                   "docker.io/library/ubuntu:22.04",
		"nvidia/cuda:12.4.1-base":        "docker.io/nvidia/cuda:12.4.1-base",
		"nvcr.io/nvidia/pytorch:24.01":   "nvcr.io/nvidia/pytorch:24.01",
		"localhost/app":                  "localhost/app:latest",
		"registry:5000/app":              "registry:5000/app:latest",
		"ubuntu@sha256:" + sha([]byte{}): "docker.io/library/ubuntu@sha256:" + sha([]byte{}),
	} {
		if got := fullImageName(in); got != want {
			t.Errorf("fullImageName(%q) = %q, want %q", in, got, want)
		}
	}
}
