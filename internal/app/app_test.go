package app

import "testing"

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
