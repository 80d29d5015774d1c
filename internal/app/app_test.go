package app

import (
	"strings"
	"testing"
)

func TestLookupEnv(t *testing.T) {
	e := &Env{Environ: []string{"A=1", "B=", "A=2", "AB=3"}}
	tests := []struct {
		key  string
		want string
		set  bool
	}{
		{"A", "2", true}, // the last one wins, as in execve's environment
		{"B", "", true},
		{"AB", "3", true},
		{"C", "", false},
	}
	for _, tc := range tests {
		if v, ok := e.LookupEnv(tc.key); v != tc.want || ok != tc.set {
			t.Errorf("LookupEnv(%q) = %q, %v; want %q, %v", tc.key, v, ok, tc.want, tc.set)
		}
	}
	if e.Getenv("A") != "2" {
		t.Error("Getenv disagrees with LookupEnv")
	}
}

func TestReadStdin(t *testing.T) {
	tests := []struct {
		stdin   *strings.Reader
		want    string
		wantErr bool
	}{
		{nil, "", false},
		{strings.NewReader(""), "", false},
		{strings.NewReader("1234"), "1234", false},
		{strings.NewReader("12345"), "", true}, // over the limit
	}
	for _, tc := range tests {
		e := &Env{}
		if tc.stdin != nil {
			e.Stdin = tc.stdin
		}
		got, err := e.ReadStdin(4)
		if string(got) != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("ReadStdin(4) = %q, %v; want %q, error %v", got, err, tc.want, tc.wantErr)
		}
	}
}
