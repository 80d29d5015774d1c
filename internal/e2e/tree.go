package e2e

import (
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TreeState describes every object below root, by its path relative to
// root (with a leading "/"; "" for root itself), those at or below skip
// (such paths) left out: its type and permissions, a link's target, a
// regular file's digest. Two roots with equal states hold the same files
// (TreeDiff).
func TreeState(t testing.TB, root string, skip ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(p, root)
		for _, s := range skip {
			if rel == s || strings.HasPrefix(rel, s+"/") {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		desc := info.Mode().String()
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + target
		case info.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += fmt.Sprintf(" %x", sha256.Sum256(b))
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TreeDiff lists, sorted, how the state got differs from want: "extra P",
// "differs P" (type, mode, target or content) and "missing P". None: the
// same files.
func TreeDiff(got, want map[string]string) []string {
	var d []string
	for p, g := range got {
		if w, ok := want[p]; !ok {
			d = append(d, "extra "+p)
		} else if g != w {
			d = append(d, "differs "+p+": "+g+", want "+w)
		}
	}
	for p := range want {
		if _, ok := got[p]; !ok {
			d = append(d, "missing "+p)
		}
	}
	slices.Sort(d)
	return d
}

// LineDiff lists the lines only one side has ("+" got, "-" want), or says
// that both hold the same lines in another order.
func LineDiff(got, want []string) string {
	var b strings.Builder
	for _, l := range got {
		if !slices.Contains(want, l) {
			b.WriteString("+ " + l + "\n")
		}
	}
	for _, l := range want {
		if !slices.Contains(got, l) {
			b.WriteString("- " + l + "\n")
		}
	}
	if b.Len() == 0 {
		return fmt.Sprintf("same lines, other order:\n got %q\nwant %q", got, want)
	}
	return b.String()
}
