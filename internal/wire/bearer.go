package wire

import "strings"

// BearerToken is the token of an "Authorization: Bearer TOKEN" header value
// (RFC 6750; the scheme is case-insensitive, the token trimmed). ok is
// false for an empty, malformed or non-Bearer value. The API's and the
// console's authentication both read the header through it.
func BearerToken(header string) (token string, ok bool) {
	scheme, token, found := strings.Cut(header, " ")
	token = strings.TrimSpace(token)
	if !found || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return "", false
	}
	return token, true
}
