package wire

import "testing"

func TestBearerToken(t *testing.T) {
	for header, want := range map[string]string{
		"Bearer abc":    "abc",
		"bearer abc":    "abc",
		"BEARER  abc  ": "abc",
		"Bearer":        "",
		"Bearer   ":     "",
		"Basic abc":     "",
		"":              "",
		"abc":           "",
	} {
		got, ok := BearerToken(header)
		if got != want || ok != (want != "") {
			t.Errorf("BearerToken(%q) = %q, %v; want %q, %v", header, got, ok, want, want != "")
		}
	}
}
