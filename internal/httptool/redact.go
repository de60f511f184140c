package httptool

import (
	"bytes"
	"cmp"
	"encoding/json"
	"slices"
	"strings"
)

// redactor replaces the configured secrets in what a downstream answers.
// A downstream that echoes the request (its headers, say, in an error
// page) would otherwise hand the credential to every caller of the tool,
// and into the database, where calls are kept for the retention period.
type redactor struct {
	secrets []string // longest first, so a secret containing another is replaced whole
	r       *strings.Replacer
}

func newRedactor(ss []Secret) redactor {
	var rd redactor
	for _, s := range ss {
		if v := s.Reveal(); v != "" && !slices.Contains(rd.secrets, v) {
			rd.secrets = append(rd.secrets, v)
		}
	}
	if len(rd.secrets) == 0 {
		return rd
	}
	slices.SortFunc(rd.secrets, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	pairs := make([]string, 0, 2*len(rd.secrets))
	for _, v := range rd.secrets {
		pairs = append(pairs, v, redacted)
	}
	// One pass: "[redacted]" itself is never searched again.
	rd.r = strings.NewReplacer(pairs...)
	return rd
}

// string is s with every secret replaced by "[redacted]".
func (rd redactor) string(s string) string {
	if rd.r == nil {
		return s
	}
	return rd.r.Replace(s)
}

// json redacts a valid, compact JSON document: every string (member names
// included) holding a secret, however the downstream escaped it. A
// document without one is returned as it came; one with a secret is
// re-encoded (members then in sorted order).
func (rd redactor) json(doc []byte) json.RawMessage {
	if rd.r == nil {
		return doc
	}
	// The bytes can hide a secret only behind an escape; without a
	// backslash, a plain search over them is exact.
	if !bytes.ContainsRune(doc, '\\') && !slices.ContainsFunc(rd.secrets, func(s string) bool {
		return bytes.Contains(doc, []byte(s))
	}) {
		return doc
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber() // numbers keep their spelling
	var v any
	if dec.Decode(&v) != nil {
		return doc // cannot happen: doc is valid JSON
	}
	v, changed := rd.value(v)
	if !changed {
		return doc
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if enc.Encode(v) != nil {
		return jsonString(redacted) // cannot happen: decoded JSON encodes
	}
	return bytes.TrimRight(buf.Bytes(), "\n")
}

func (rd redactor) value(v any) (any, bool) {
	switch x := v.(type) {
	case string:
		r := rd.string(x)
		return r, r != x
	case []any:
		changed := false
		for i, e := range x {
			var c bool
			x[i], c = rd.value(e)
			changed = changed || c
		}
		return x, changed
	case map[string]any:
		out := make(map[string]any, len(x))
		changed := false
		for k, e := range x {
			nk := rd.string(k)
			ne, c := rd.value(e)
			out[nk] = ne
			changed = changed || c || nk != k
		}
		return out, changed
	}
	return v, false
}

// Redactor replaces secrets in what a remote system answers, for the
// other tool kinds (internal/tool/mcptool): the same rule as the http
// kind's, in one home.
type Redactor struct{ r redactor }

// NewRedactor redacts the values of ss.
func NewRedactor(ss []Secret) Redactor { return Redactor{newRedactor(ss)} }

// String is s with every secret replaced by "[redacted]".
func (r Redactor) String(s string) string { return r.r.string(s) }

// JSON redacts a valid JSON document's strings.
func (r Redactor) JSON(doc []byte) json.RawMessage { return r.r.json(doc) }
