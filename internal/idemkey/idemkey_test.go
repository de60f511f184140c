package idemkey

import (
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want string // "" = accepted; else a part of the error
	}{
		{"k", ""},
		{"!~", ""},
		{"order-4711/charge..", ""},
		{strings.Repeat("k", MaxLength), ""},
		{"", "is empty"},
		{strings.Repeat("k", MaxLength+1), "256 bytes"},
		{"a b", "byte 0x20 at offset 1"},
		{"a\x7f", "byte 0x7f at offset 1"},
		{"é", "byte 0xc3 at offset 0"},
		{"a\tb", "byte 0x09"},
	} {
		err := Check(tc.key)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("Check(%q) = %v, want accepted", tc.key, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("Check(%q) = %v, want an error containing %q", tc.key, err, tc.want)
		}
	}
}
