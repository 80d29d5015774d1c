package ldcache

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseConf(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []ConfLine
		err      bool
	}{
		{"empty", "", nil, false},
		{"debian", "include /etc/ld.so.conf.d/*.conf\n\n", []ConfLine{{Include: []string{"/etc/ld.so.conf.d/*.conf"}, Line: 1}}, false},
		{"dirs and comments", "# c\n/usr/lib64\n  /opt/a/lib/ # x\n\t/opt/b//\n", []ConfLine{{Dir: "/usr/lib64", Line: 2}, {Dir: "/opt/a/lib/ ", Line: 3}, {Dir: "/opt/b", Line: 4}}, false},
		{"include list", "include\ta.conf  b/*.conf\t\n", []ConfLine{{Include: []string{"a.conf", "b/*.conf"}, Line: 1}}, false},
		{"no newline at end", "/lib", []ConfLine{{Dir: "/lib", Line: 1}}, false},
		{"include alone is a directory", "include\n", nil, true},
		{"hwcap", "HWCAP 0 tls\n", nil, true},
		{"relative", "lib\n", nil, true},
		{"type", "/usr/lib=libc6\n", nil, true},
		{"unclean", "/usr/./lib\n", nil, true},
		{"root", "/\n", nil, true},
		{"nul ends the line", "/lib\x00junk\n", []ConfLine{{Dir: "/lib", Line: 1}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseConf([]byte(tc.in))
			if tc.err {
				if !errors.Is(err, ErrConfUnsupported) {
					t.Fatalf("err = %v, want ErrConfUnsupported", err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ParseConf(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			}
		})
	}
}

func FuzzParseConf(f *testing.F) {
	for _, s := range []string{"include /etc/ld.so.conf.d/*.conf\n", "/usr/lib\n# x\n", "hwcap 1 x\n", "/a=b\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		lines, err := ParseConf(data)
		if err != nil {
			if !errors.Is(err, ErrConfUnsupported) {
				t.Fatalf("error %v does not wrap ErrConfUnsupported", err)
			}
			return
		}
		for _, l := range lines {
			if (l.Dir == "") == (l.Include == nil) {
				t.Fatalf("line %+v: want a directory or includes", l)
			}
			if l.Dir != "" && (!strings.HasPrefix(l.Dir, "/") || strings.ContainsAny(l.Dir, "#\n\x00=")) {
				t.Fatalf("bad directory %q", l.Dir)
			}
			for _, p := range l.Include {
				if p == "" || strings.ContainsAny(p, " \t#\n") {
					t.Fatalf("bad pattern %q", p)
				}
			}
		}
	})
}
