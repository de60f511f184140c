package sqlite

import (
	"hash/maphash"
	"sync/atomic"
)

// recentKeys remembers, approximately, the keys this store created or
// answered lately. CreateOrGet asks the read pool first only for a key it
// holds: a replay of a key just seen (a retry storm, a client that lost
// its answer) is then answered from a read without waiting for the
// writer, while a new key, which is what most requests carry, goes
// straight to the writer, which looks the key up anyway. A read-pool
// lookup of a new key found nothing and cost a statement on a connection
// whose page cache every commit invalidates (WAL mode), the more so the
// larger the file.
//
// Both answers are only hints: a key it does not hold (evicted, created
// before a restart, or by another process) is answered by the writer, a
// key it wrongly holds (two keys sharing a slot) by a read that finds
// nothing and falls through to the writer, exactly as before.
type recentKeys struct {
	seed  maphash.Seed
	slots [recentSlots]atomic.Uint64
}

// recentSlots is the table's size: 64 KiB of hashes, direct-mapped (a new
// key replaces whatever held its slot), so at several thousand new keys a
// second a key stays about a second or more; a storm on one key refreshes it.
const recentSlots = 8192

func newRecentKeys() *recentKeys { return &recentKeys{seed: maphash.MakeSeed()} }

// hash is the key's hash, never 0 (0 marks an empty slot).
func (r *recentKeys) hash(principal, key string) uint64 {
	var h maphash.Hash
	h.SetSeed(r.seed)
	h.WriteString(principal)
	h.WriteByte(0)
	h.WriteString(key)
	return h.Sum64() | 1
}

func (r *recentKeys) holds(h uint64) bool { return r.slots[h%recentSlots].Load() == h }

func (r *recentKeys) add(h uint64) { r.slots[h%recentSlots].Store(h) }
