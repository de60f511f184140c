package httptool

import (
	"fmt"
	"log/slog"
)

// redacted is what a Secret shows instead of its value.
const redacted = "[redacted]"

// Secret holds a value that must never be shown: a header value after
// ${VAR} expansion (docs/tools.md, "The http kind"). Every way Go prints or
// encodes a value (fmt verbs, %#v, JSON, slog) shows "[redacted]"; only
// Reveal gives the value, and only the request builder calls it.
type Secret struct{ value string }

// NewSecret wraps a value.
func NewSecret(value string) Secret { return Secret{value: value} }

// Reveal returns the value, to put it on the wire.
func (s Secret) Reveal() string { return s.value }

// String redacts.
func (s Secret) String() string { return redacted }

// GoString redacts (%#v).
func (s Secret) GoString() string { return redacted }

// Format redacts for every verb, %x and %q included.
func (s Secret) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// MarshalJSON redacts.
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// MarshalText redacts (YAML, TOML and text encoders).
func (s Secret) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// LogValue redacts in structured logs.
func (s Secret) LogValue() slog.Value { return slog.StringValue(redacted) }
