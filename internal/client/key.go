package client

import (
	"github.com/idemctl/idemctl/internal/idemkey"
	"github.com/idemctl/idemctl/internal/wire"
)

// MaxKeyLength is the longest idempotency key the server accepts, in bytes.
const MaxKeyLength = idemkey.MaxLength

// CheckKey reports whether the server could ever accept key as an
// Idempotency-Key: 1 to MaxKeyLength visible ASCII characters (0x21–0x7E),
// compared byte for byte (docs/api.md, "Headers"). A key that fails can
// never have been recorded, so waiting for it by key could only run into
// the deadline. The error is an *APIError with code invalid_key
// (errors.Is(err, ErrInvalidKey)).
//
// The rule is idemkey's, the same the server applies to every request;
// checking it here lets a client refuse before it sends anything.
func CheckKey(key string) error {
	if err := idemkey.Check(key); err != nil {
		return &APIError{Code: wire.CodeInvalidKey, Message: "the idempotency key " + err.Error()}
	}
	return nil
}
