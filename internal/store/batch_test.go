package store

import "testing"

func TestNextBatch(t *testing.T) {
	ops, quit := make(chan int, 10), make(chan struct{})
	for i := range 5 {
		ops <- i
	}
	batch, ok := NextBatch(ops, quit, nil, 3)
	if !ok || len(batch) != 3 || batch[0] != 0 || batch[2] != 2 {
		t.Fatalf("first batch %v, %v; want [0 1 2] (at most max)", batch, ok)
	}
	batch, ok = NextBatch(ops, quit, batch, 3)
	if !ok || len(batch) != 2 || batch[0] != 3 || batch[1] != 4 {
		t.Fatalf("second batch %v, %v; want [3 4] (whoever waits, no lingering)", batch, ok)
	}
	close(quit)
	if batch, ok = NextBatch(ops, quit, batch, 3); ok || len(batch) != 0 {
		t.Fatalf("after quit: %v, %v; want an empty batch and false", batch, ok)
	}
}
