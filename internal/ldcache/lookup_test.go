package ldcache

// LookupArch is Lookup for one exact architecture flag (Entry.Arch), as
// NVIDIA's tools select entries: see HostArch.
func (c *Cache) LookupArch(arch uint32, prefixes ...string) []Entry {
	return c.lookup(func(e Entry) bool { return e.Arch() == arch }, prefixes)
}
