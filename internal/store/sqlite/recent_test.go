package sqlite

import (
	"errors"
	"testing"
	"time"

	"github.com/idemctl/idemctl/internal/store"
)

// TestReplayOfARecentKeyNeedsNoWriter: a replay of a key the store has
// just created (or answered) is answered from the read pool, so it is
// answered while another connection holds the write lock, as a replay
// storm is while the writer is busy. A new key, and a key the store has
// not seen lately (here: created by another store on the file), go to the
// writer, which looks the key up itself: they wait for the lock.
func TestReplayOfARecentKeyNeedsNoWriter(t *testing.T) {
	t.Parallel()
	path := tempPath(t)
	s := openAt(t, path, store.Options{BusyTimeout: 50 * time.Millisecond})
	other := openAt(t, path, store.Options{})
	call := func(id, key string) store.NewCall {
		return store.NewCall{CallID: id, IdemKey: key, Fingerprint: "f", Tool: "charge", ArgsJSON: []byte(`{}`)}
	}
	ctx := t.Context()
	created, out, err := s.CreateOrGet(ctx, call("c_00000000000000a1", "seen"))
	if err != nil || out != store.Created {
		t.Fatalf("create: %v, %v", out, err)
	}
	if _, _, err := other.CreateOrGet(ctx, call("c_00000000000000a2", "unseen")); err != nil {
		t.Fatal(err)
	}

	// Hold the write lock from another connection.
	conn, err := other.w.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tx, err := conn.BeginTx(ctx, nil) // BEGIN IMMEDIATE
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()

	got, out, err := s.CreateOrGet(ctx, call("c_00000000000000a3", "seen"))
	if err != nil || out != store.Existing || got.CallID != created.CallID {
		t.Fatalf("replay of a recent key under another's write lock = %s, %v, %v; want Existing %s from a read",
			got.CallID, out, err, created.CallID)
	}
	if _, _, err := s.CreateOrGet(ctx, call("c_00000000000000a4", "unseen")); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("a key this store has not seen, under another's write lock: err = %v, want ErrUnavailable (the writer)", err)
	}
	if _, _, err := s.CreateOrGet(ctx, call("c_00000000000000a5", "new")); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("a new key under another's write lock: err = %v, want ErrUnavailable (the writer)", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}

	// Once the writer has answered the unseen key's replay, the store holds
	// it, and the answer is the call the other store created.
	c, out, err := s.CreateOrGet(ctx, call("c_00000000000000a6", "unseen"))
	if err != nil || out != store.Existing || c.CallID != "c_00000000000000a2" {
		t.Fatalf("replay of the unseen key = %s, %v, %v; want Existing c_00000000000000a2", c.CallID, out, err)
	}
	if !s.recent.holds(s.recent.hash("", "unseen")) {
		t.Fatal("a key the writer answered is not held as recent")
	}
}

// TestRecentKeys: a key added is held; hashes are never 0 (an empty
// slot); principal and key are told apart ("a"+"bc" is not "ab"+"c").
func TestRecentKeys(t *testing.T) {
	r := newRecentKeys()
	h := r.hash("p", "k")
	if r.holds(h) {
		t.Fatal("an empty table holds a key")
	}
	r.add(h)
	if !r.holds(h) || !r.holds(r.hash("p", "k")) {
		t.Fatal("an added key is not held")
	}
	if r.hash("a", "bc") == r.hash("ab", "c") {
		t.Fatal("principal and key run together")
	}
	for i := range 1000 {
		if r.hash("", string(rune(i))) == 0 {
			t.Fatal("a hash of 0 would look like an empty slot")
		}
	}
}
