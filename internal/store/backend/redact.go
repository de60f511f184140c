package backend

import (
	"net/url"
	"regexp"
	"strings"
)

// redacted replaces a password wherever Redact finds one.
const redacted = "xxxxx"

// secretParams are the connection parameters that hold a secret: the
// password and the client key's passphrase.
var secretParams = []string{"password", "sslpassword"}

// kvPassword matches a secret in a libpq key=value DSN: password=secret,
// password = 'a secret' or 'with \' escapes' (libpq's quoting: single
// quotes, backslash escapes inside them), and the same for sslpassword.
var kvPassword = regexp.MustCompile(`(?i)\b((?:ssl)?password)\s*=\s*('(?:[^'\\]|\\.)*'?|\S*)`)

// Redact returns dsn with every password hidden, so it can be printed in a
// banner, a log line or an error: the userinfo password of a URL
// (postgres://u:secret@h/db), a password= query parameter
// (postgres://h/db?password=secret) and a libpq key=value password
// (host=h password=secret, quoted or not). A URL that cannot be parsed is
// shown as its scheme only. A plain SQLite path is returned unchanged.
func Redact(dsn string) string {
	if i := strings.Index(dsn, "://"); i >= 0 {
		u, err := url.Parse(dsn)
		if err != nil {
			return dsn[:i] + "://(unparsable, not shown)"
		}
		q := u.Query()
		changed := false
		for _, p := range secretParams {
			if q.Has(p) {
				q.Set(p, redacted)
				changed = true
			}
		}
		if changed {
			u.RawQuery = q.Encode()
		}
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), redacted)
		}
		return u.String()
	}
	if isKeyValue(dsn) {
		return kvPassword.ReplaceAllString(dsn, "${1}="+redacted)
	}
	return dsn
}

// libpqKeywords are the connection parameters of a libpq key=value DSN
// ("host=db dbname=idem"), the ones pgx understands or passes on.
var libpqKeywords = map[string]bool{
	"host": true, "hostaddr": true, "port": true, "dbname": true, "user": true,
	"password": true, "passfile": true, "connect_timeout": true, "sslmode": true,
	"sslrootcert": true, "sslcert": true, "sslkey": true, "sslpassword": true,
	"sslnegotiation": true, "sslsni": true, "application_name": true, "options": true,
	"service": true, "servicefile": true, "target_session_attrs": true,
	"client_encoding": true, "search_path": true, "min_read_buffer_size": true,
	"statement_cache_capacity": true, "default_query_exec_mode": true,
	"pool_max_conns": true, "pool_min_conns": true,
}

// isKeyValue reports whether dsn reads as a libpq key=value DSN: its first
// word is "keyword=" for a libpq keyword. A file path such as "a=b.db" or
// "./host=x.db" is not taken for one.
func isKeyValue(dsn string) bool {
	first := strings.TrimSpace(dsn)
	key, _, ok := strings.Cut(first, "=")
	if !ok {
		return false
	}
	return libpqKeywords[strings.ToLower(strings.TrimSpace(key))]
}
