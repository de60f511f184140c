// Package idemkey holds the one rule for what an Idempotency-Key may be, so
// the server (which refuses a bad key with 400) and the client (which
// refuses it before sending anything) cannot drift apart.
package idemkey

import "fmt"

// MaxLength is the longest key accepted, in bytes.
const MaxLength = 255

// Check reports why key can never be accepted, or nil: a key is 1 to
// MaxLength visible ASCII characters (0x21–0x7E), compared byte for byte
// (docs/api.md, "Submitting a call"). The error's text has no subject
// ("is empty; …") so each caller names the key in its own words.
func Check(key string) error {
	if key == "" {
		return fmt.Errorf("is empty; it must be 1 to %d visible ASCII characters", MaxLength)
	}
	if len(key) > MaxLength {
		return fmt.Errorf("is %d bytes; at most %d are allowed", len(key), MaxLength)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x21 || c > 0x7E {
			return fmt.Errorf("has byte 0x%02x at offset %d; only visible ASCII (0x21-0x7E) is allowed", c, i)
		}
	}
	return nil
}
