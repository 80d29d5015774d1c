package ldcache

import (
	"slices"
	"strings"
)

// Lookup returns the ELF entries of class whose key starts with any of
// prefixes, in file order. With no prefixes it returns every ELF entry of
// that class.
func (c *Cache) Lookup(class Class, prefixes ...string) []Entry {
	return c.lookup(func(e Entry) bool { return e.Class() == class }, prefixes)
}

// lookup returns the ELF entries accepted by want whose key starts with
// any of prefixes (all of them for no prefixes).
func (c *Cache) lookup(want func(Entry) bool, prefixes []string) []Entry {
	m := newPrefixSet(prefixes)
	var out []Entry
	for _, e := range c.Entries {
		if e.IsELF() && want(e) && (len(prefixes) == 0 || m.matches(e.Key)) {
			out = append(out, e)
		}
	}
	return out
}

// prefixSet answers "does s start with any of these prefixes" in
// O(log n) comparisons: the prefixes are sorted and those that extend
// another prefix are dropped, which leaves a prefix-free set in which the
// only candidate for s is the greatest prefix ≤ s.
type prefixSet []string

func newPrefixSet(prefixes []string) prefixSet {
	sorted := slices.Clone(prefixes)
	slices.Sort(sorted)
	var set prefixSet
	for _, p := range sorted {
		// Sorted order puts a prefix right before everything extending it.
		if len(set) > 0 && strings.HasPrefix(p, set[len(set)-1]) {
			continue
		}
		set = append(set, p)
	}
	return set
}

func (ps prefixSet) matches(s string) bool {
	// i is the number of prefixes ≤ s.
	i, found := slices.BinarySearch(ps, s)
	if found {
		return true
	}
	return i > 0 && strings.HasPrefix(s, ps[i-1])
}
