package client

import "fmt"

// MaxKeyLength is the longest idempotency key the server accepts, in bytes.
const MaxKeyLength = 255

// CheckKey reports whether the server could ever accept key as an
// Idempotency-Key: 1 to MaxKeyLength visible ASCII characters (0x21–0x7E),
// compared byte for byte (docs/api.md, "Headers"). A key that fails can
// never have been recorded, so waiting for it by key could only run into
// the deadline. The error is an *APIError with code invalid_key
// (errors.Is(err, ErrInvalidKey)).
//
// The server applies the same rule to every request (internal/server,
// checkKey); this copy lets a client refuse before it sends anything.
func CheckKey(key string) error {
	bad := func(format string, a ...any) error {
		return &APIError{Code: CodeInvalidKey, Message: fmt.Sprintf(format, a...)}
	}
	if key == "" {
		return bad("the idempotency key is empty; it must be 1 to %d visible ASCII characters", MaxKeyLength)
	}
	if len(key) > MaxKeyLength {
		return bad("the idempotency key is %d bytes; at most %d are allowed", len(key), MaxKeyLength)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x21 || c > 0x7E {
			return bad("the idempotency key has byte 0x%02x at offset %d; only visible ASCII (0x21-0x7E) is allowed", c, i)
		}
	}
	return nil
}
