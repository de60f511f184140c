package store

// NextBatch is the group commit's intake, shared by both backends' committers
// (store/sqlite commit.go, store/postgres group.go): it waits for one write
// on ops, then takes whoever else is waiting at that moment, up to max, and
// returns them in batch (reused: its old contents are dropped). It does not
// linger for more: an idle store commits a lone write at once, a busy one
// builds its next batch while the current commit's flush runs. ok is false
// once quit is closed.
func NextBatch[T any](ops <-chan T, quit <-chan struct{}, batch []T, max int) (_ []T, ok bool) {
	clear(batch) // drop references to finished ops
	select {
	case op := <-ops:
		batch = append(batch[:0], op)
	case <-quit:
		return batch[:0], false
	}
	for len(batch) < max {
		select {
		case op := <-ops:
			batch = append(batch, op)
		default:
			return batch, true
		}
	}
	return batch, true
}
