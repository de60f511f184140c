package sqlite

import (
	"context"
	"database/sql"
	"time"
)

// Checkpoints run beside the writer, not in it.
//
// By default SQLite checkpoints in the connection that commits: the commit
// that takes the WAL past 1,000 pages copies them into the database file and
// fsyncs it before it returns. Here that connection is the one writer every
// request waits on (commit.go), so each checkpoint stalled every write for
// the time of a scattered write and an fsync of the main file — the largest
// source of the writer's latency tail, and a growing one on a large
// database, whose checkpointed pages are far apart.
//
// So the write connection checkpoints only as a backstop (walBackstopPages),
// and a goroutine with a connection of its own runs PASSIVE checkpoints
// every checkpointEvery. A PASSIVE checkpoint takes no lock a writer needs:
// the writer keeps appending while the pages are copied. Durability does not
// change: a commit is durable once its WAL frames are fsynced
// (synchronous=FULL); a checkpoint only moves committed pages into the main
// file, and crash recovery replays whatever it had not moved.
const (
	// checkpointEvery: at a few thousand calls a second and about five
	// pages a call, the WAL grows by a few thousand pages between
	// checkpoints, a few tens of MB at most.
	checkpointEvery = 100 * time.Millisecond
	// walBackstopPages is the write connection's wal_autocheckpoint: it
	// checkpoints itself only when the background checkpointer has fallen
	// this far behind (or is gone), so the WAL stays bounded (16,000 pages
	// of 4 KiB: 64 MiB).
	walBackstopPages = 16000
)

// checkpointer runs PASSIVE checkpoints on db (a pool of one connection of
// its own) every checkpointEvery until quit is closed; it closes done when
// it has returned. A failed checkpoint is retried at the next tick: the
// backstop bounds the WAL meanwhile.
func checkpointer(db *sql.DB, quit <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(checkpointEvery)
	defer t.Stop()
	for {
		select {
		case <-quit:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), checkpointEvery*10)
		var busy, logged, moved int
		_ = db.QueryRowContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &logged, &moved)
		cancel()
	}
}
