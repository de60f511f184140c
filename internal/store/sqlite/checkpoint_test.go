package sqlite

import (
	"context"
	"database/sql"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// TestCheckpointsRunBesideTheWriter: committed pages reach the main database
// file without the write connection checkpointing (its wal_autocheckpoint is
// the far backstop), so the checkpointer goroutine moved them. With the
// checkpointer not running, the main file keeps its size after the WAL has
// grown by hundreds of pages.
func TestCheckpointsRunBesideTheWriter(t *testing.T) {
	t.Parallel()
	path := tempPath(t)
	s := openAt(t, path, store.Options{})
	var auto int
	if err := s.w.QueryRowContext(t.Context(), "PRAGMA wal_autocheckpoint").Scan(&auto); err != nil {
		t.Fatal(err)
	}
	if auto != walBackstopPages {
		t.Fatalf("write connection: wal_autocheckpoint = %d, want the backstop %d", auto, walBackstopPages)
	}
	size := func() int64 {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	before := size()
	detail := strings.Repeat("x", 4000) // about a page per row
	for i := range 300 {
		err := s.writeTx(t.Context(), store.WriteCreate, func(ctx context.Context, tx *sql.Tx) error {
			return s.insertAudit(ctx, tx, float64(i), "c_ckpt", "created", detail)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// 300 pages is far below the backstop: only the checkpointer can have
	// moved them into the main file.
	deadline := time.Now().Add(10 * time.Second)
	for size() < before+200*4096 {
		if time.Now().After(deadline) {
			t.Fatalf("main database file %d bytes after 300 page-sized commits (was %d): no checkpoint ran", size(), before)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
