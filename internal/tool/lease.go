package tool

import "context"

// A worker frozen past its lease (a GC pause, a stopped VM: the design's
// §12.3.2) wakes up believing it still runs the call, while another worker
// has taken it over. Fencing refuses its completion, but a request it sends
// after waking reaches the downstream all the same: against a downstream
// that honours Idempotency-Key that is harmless, against one that does not
// it is a second effect that no lookup can prevent (the lookup ran before
// it). So a tool that sends asks, right before sending, whether the
// attempt still holds its lease by this process's clock, and sends nothing
// when it does not.

type leaseCheckKey struct{}

// WithLeaseCheck returns ctx carrying held, which reports whether the
// attempt still holds its lease (the executor's heartbeat keeps it).
func WithLeaseCheck(ctx context.Context, held func() bool) context.Context {
	return context.WithValue(ctx, leaseCheckKey{}, held)
}

// LeaseHeld reports whether the attempt running under ctx still holds its
// lease: true when ctx carries no check (a tool run outside the executor).
// A tool calls it right before a request with an effect; false means the
// lease lapsed (the context is then cancelled with the executor's cause),
// and the tool returns ctx's error without sending.
func LeaseHeld(ctx context.Context) bool {
	held, ok := ctx.Value(leaseCheckKey{}).(func() bool)
	return !ok || held()
}
