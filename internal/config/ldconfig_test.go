package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseLdconfig(t *testing.T) {
	tests := []struct {
		in      string
		want    Ldconfig
		wantErr bool
	}{
		{"", Ldconfig{}, false},
		{"@/sbin/ldconfig", Ldconfig{Path: "/sbin/ldconfig", Host: true}, false},
		{"@/sbin/ldconfig.real", Ldconfig{Path: "/sbin/ldconfig.real", Host: true}, false},
		{"/sbin/ldconfig", Ldconfig{Path: "/sbin/ldconfig"}, false},
		{"@sbin/ldconfig", Ldconfig{}, true},
		{"ldconfig", Ldconfig{}, true},
		{"@", Ldconfig{}, true},
	}
	for _, tt := range tests {
		got, err := ParseLdconfig(tt.in)
		if tt.wantErr {
			var le *LdconfigError
			if !errors.As(err, &le) || le.InContainer || le.Value != tt.in || !strings.Contains(err.Error(), "not an absolute path") {
				t.Errorf("ParseLdconfig(%q) = %+v, %v; want a not-absolute *LdconfigError", tt.in, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseLdconfig(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
		if s := got.String(); s != tt.in {
			t.Errorf("ParseLdconfig(%q).String() = %q", tt.in, s)
		}
		if got.InContainer() != (tt.in != "" && !strings.HasPrefix(tt.in, "@")) {
			t.Errorf("ParseLdconfig(%q).InContainer() = %v", tt.in, got.InContainer())
		}
	}
}

func TestParseHostLdconfig(t *testing.T) {
	if l, err := ParseHostLdconfig("/usr/sbin/ldconfig"); err != nil || l != (Ldconfig{Path: "/usr/sbin/ldconfig", Host: true}) {
		t.Errorf("ParseHostLdconfig(/usr/sbin/ldconfig) = %+v, %v", l, err)
	}
	if l, err := ParseHostLdconfig(""); err != nil || l != (Ldconfig{}) {
		t.Errorf("ParseHostLdconfig(\"\") = %+v, %v", l, err)
	}
	var le *LdconfigError
	if _, err := ParseHostLdconfig("sbin/ldconfig"); !errors.As(err, &le) || le.InContainer {
		t.Errorf("ParseHostLdconfig(sbin/ldconfig) = %v, want a not-absolute *LdconfigError", err)
	}
}

// TestLdconfigNormalize pins the ".real" rule: X.real is preferred when it
// is a regular file, and a configured X.real that is missing falls back to
// X.
func TestLdconfigNormalize(t *testing.T) {
	d := t.TempDir()
	for _, f := range []string{"plain", "wrapped", "wrapped.real", "realonly.real"} {
		if err := os.WriteFile(filepath.Join(d, f), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(d, "dir.real"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		in   Ldconfig
		want Ldconfig
	}{
		{Ldconfig{Path: d + "/plain", Host: true}, Ldconfig{Path: d + "/plain", Host: true}},
		{Ldconfig{Path: d + "/wrapped", Host: true}, Ldconfig{Path: d + "/wrapped.real", Host: true}},
		{Ldconfig{Path: d + "/wrapped.real", Host: true}, Ldconfig{Path: d + "/wrapped.real", Host: true}},
		{Ldconfig{Path: d + "/realonly.real", Host: true}, Ldconfig{Path: d + "/realonly.real", Host: true}},
		{Ldconfig{Path: d + "/plain.real", Host: true}, Ldconfig{Path: d + "/plain", Host: true}},
		{Ldconfig{Path: d + "/dir", Host: true}, Ldconfig{Path: d + "/dir", Host: true}},
		// Container paths are not looked at on the host.
		{Ldconfig{Path: d + "/wrapped"}, Ldconfig{Path: d + "/wrapped"}},
		{Ldconfig{}, Ldconfig{}},
	}
	for _, tt := range tests {
		if got := tt.in.Normalize(); got != tt.want {
			t.Errorf("%+v.Normalize() = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

func TestLdconfigHostPath(t *testing.T) {
	d := t.TempDir()
	for _, f := range []string{"ld", "ld.real"} {
		if err := os.WriteFile(filepath.Join(d, f), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if p, err := (Ldconfig{Path: d + "/ld", Host: true}).HostPath(); err != nil || p != d+"/ld.real" {
		t.Errorf("HostPath = %q, %v; want %s/ld.real", p, err, d)
	}
	want := DefaultLdconfig
	if st, err := os.Stat(DefaultLdconfig + ".real"); err == nil && st.Mode().IsRegular() {
		want += ".real"
	}
	if p, err := (Ldconfig{}).HostPath(); err != nil || p != want {
		t.Errorf("zero HostPath = %q, %v; want %q", p, err, want)
	}
	var le *LdconfigError
	_, err := Ldconfig{Path: "/sbin/ldconfig"}.HostPath()
	if !errors.As(err, &le) || !le.InContainer || le.Value != "/sbin/ldconfig" || !strings.Contains(err.Error(), "container path") {
		t.Errorf("container HostPath: %v, want an in-container *LdconfigError", err)
	}
}

func TestConfigLdconfig(t *testing.T) {
	tests := []struct {
		name     string
		value    string
		allow    bool
		setting  Ldconfig
		host     Ldconfig
		errParts []string // "" parts: no error
	}{
		{"host", "@/sbin/ldconfig.real", false, Ldconfig{Path: "/sbin/ldconfig.real", Host: true}, Ldconfig{Path: "/sbin/ldconfig.real", Host: true}, nil},
		{"empty is the default", "", false, Ldconfig{}, Ldconfig{}, nil},
		{"container path refused", "/sbin/ldconfig", false, Ldconfig{}, Ldconfig{},
			[]string{`nvidia-container-cli.ldconfig = "/sbin/ldconfig" is a container path`, "features.allow-ldconfig-from-container", "@/sbin/ldconfig"}},
		{"container path allowed: the host default", "/sbin/ldconfig", true, Ldconfig{Path: "/sbin/ldconfig"}, Ldconfig{}, nil},
		{"relative", "@ldconfig", true, Ldconfig{}, Ldconfig{},
			[]string{`nvidia-container-cli.ldconfig = "@ldconfig" is not an absolute path`, "@/sbin/ldconfig"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			c.CLI.Ldconfig, c.Features.AllowLdconfigFromContainer = tt.value, tt.allow
			l, err := c.LdconfigSetting()
			h, herr := c.HostLdconfig()
			verr := c.Validate()
			if tt.errParts == nil {
				if err != nil || herr != nil || verr != nil || l != tt.setting || h != tt.host {
					t.Fatalf("LdconfigSetting = %+v, %v; HostLdconfig = %+v, %v; Validate = %v; want %+v, %+v",
						l, err, h, herr, verr, tt.setting, tt.host)
				}
				return
			}
			var le *LdconfigError
			for _, e := range []error{err, herr, verr} {
				if !errors.As(e, &le) {
					t.Fatalf("error %v: no *LdconfigError in the chain", e)
				}
				for _, part := range tt.errParts {
					if !strings.Contains(e.Error(), part) {
						t.Errorf("error %q lacks %q", e, part)
					}
				}
			}
		})
	}
}
