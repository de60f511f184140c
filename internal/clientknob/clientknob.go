// Package clientknob holds the settings of the public client
// (github.com/idemctl/idemctl/client) that only idemctl itself may use.
// They travel in the context because an internal package is the one place
// an outside module cannot reach: the public API stays free of a knob that
// exists to show a bug, and of a header that only `idemctl mcp` sends.
package clientknob

import "context"

type key int

const (
	newKeyOnRetryKey key = iota
	viaKey
)

// WithNewKeyOnRetry makes the client send attempt n of a POST under the
// key K-(n-1) instead of K: the duplicate-effect bug, kept on purpose for
// `idemctl call --new-key-on-retry` (docs/design.md, "What a retry with a
// new key does").
func WithNewKeyOnRetry(ctx context.Context) context.Context {
	return context.WithValue(ctx, newKeyOnRetryKey, true)
}

// NewKeyOnRetry reports whether ctx asks for the new-key bug.
func NewKeyOnRetry(ctx context.Context) bool {
	on, _ := ctx.Value(newKeyOnRetryKey).(bool)
	return on
}

// WithVia names the door a new call comes through (header Idemctl-Via):
// "mcp" for the calls `idemctl mcp` forwards.
func WithVia(ctx context.Context, door string) context.Context {
	return context.WithValue(ctx, viaKey, door)
}

// Via is the door ctx names, "" if none.
func Via(ctx context.Context) string {
	door, _ := ctx.Value(viaKey).(string)
	return door
}
