package client

import (
	"crypto/rand"

	"github.com/idemctl/idemctl/internal/idemkey"
	"github.com/idemctl/idemctl/internal/wire"
)

// MaxKeyLength is the longest idempotency key the server accepts, in bytes.
const MaxKeyLength = idemkey.MaxLength

// NewKey returns a fresh random idempotency key: 26 characters of base32
// (128 bits from crypto/rand), so two callers never pick the same one.
// Choose it once per logical call, before the first attempt, and keep it
// for every retry of that call.
func NewKey() string { return rand.Text() }

// CheckKey reports whether the server could ever accept key as an
// Idempotency-Key: 1 to MaxKeyLength visible ASCII characters (0x21–0x7E),
// compared byte for byte (docs/api.md, "Headers"). The error is an
// *APIError with code invalid_key (errors.Is(err, ErrInvalidKey)). Submit
// and WaitByKey check it before sending anything: a key that fails can
// never have been recorded.
func CheckKey(key string) error {
	// The rule is idemkey's, the same the server applies to every request.
	if err := idemkey.Check(key); err != nil {
		return &APIError{Code: wire.CodeInvalidKey, Message: "the idempotency key " + err.Error()}
	}
	return nil
}
