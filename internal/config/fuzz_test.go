package config

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// FuzzLoad parses arbitrary TOML: it must either fail with an error naming
// the file or give a configuration that Render writes back to an equal one.
// Seeds: testdata/fuzz/FuzzLoad and the ones below.
func FuzzLoad(f *testing.F) {
	for _, s := range []string{
		nvidiaDefaultFile,
		"disable-require = true\n",
		"[nvidia-container-cli]\nroot = \"/run/nvidia/driver\"\nenvironment = [\"A=1\"]\n",
		"future = {a = [1, 2.5, \"x\"]}\n[[t]]\nb = 1979-05-27\n",
		"[nvidia-container-cli]\nldconfig = \"/sbin/ldconfig\"\n",
		"disable-require = \"yes\"\n",
		"[a\n",
		"\"quoted key\" = \"\\u0001\"\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, "fuzz.toml")
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz.toml") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		for _, out := range [][]byte{Render(c), must(Marshal(c))} {
			again, err := Parse(out, "again.toml")
			if err != nil {
				t.Fatalf("rendered config does not parse: %v\ninput:\n%s\nrendered:\n%s", err, data, out)
			}
			again.Path, again.Warnings, c.Warnings = c.Path, nil, nil
			// Unknown values may hold NaN: compare them as rendered.
			if !bytes.Equal(Render(again), Render(c)) {
				t.Fatalf("rendering differs after a round trip:\n%s\n---\n%s", Render(again), Render(c))
			}
			ua, uc := again.Unknown, c.Unknown
			again.Unknown, c.Unknown = nil, nil
			eq := reflect.DeepEqual(again, c)
			again.Unknown, c.Unknown = ua, uc
			if !eq {
				t.Fatalf("round trip differs:\n got %#v\nwant %#v\ninput:\n%s\nrendered:\n%s", again, c, data, out)
			}
		}
	})
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
