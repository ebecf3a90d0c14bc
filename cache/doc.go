// Package cache is streamgate's response store: a byte-bounded in-memory
// cache (ristretto) with per-entry lifetimes and coalesced fills, so that many
// concurrent misses for one key cause one upstream fill, and an expired entry
// keeps being served while one refresh runs (stale-while-revalidate) or while
// the upstream fails (stale-if-error).
//
// A Store owns its tiers, as groupcache's Group.load does: LoadFrom looks
// in memory, then in the shared tier (Config.Shared, cache/shared's Tier)
// through the key's Check, then calls the Source's fill. An entry's parsed
// value is typed by its Kind.
//
// The package knows nothing of HTTP: an Entry is a body, a status and its
// lifetime, and a fill is any function that produces one. Keys are built with
// ReportKey, LatestKey, PageKey and CatalogKey, which keep networks and
// credential scopes apart.
//
// A Store is safe for concurrent use; it owns the goroutines of its fills,
// and Close waits for them.
package cache
