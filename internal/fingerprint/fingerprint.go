// Package fingerprint computes the request fingerprint (docs/fingerprint.md,
// "What is fingerprinted"), version 1:
//
//	fingerprint = hex(SHA-256(JCS(normalize({"tool": tool, "args": args}))))
//
// where JCS is RFC 8785 canonical JSON and normalize turns every string (member
// names and values) into Unicode NFC and drops every object member whose value
// is null. Key order, whitespace, 1 vs 1.0 vs 1e0, NFC vs NFD spellings and
// {"x": null} vs {} therefore all give the same fingerprint.
//
// Inputs that cannot be fingerprinted unambiguously are refused rather than
// silently coerced: duplicate member names (encoding/json would keep the last
// one, so two different bodies would look the same), invalid UTF-8 and lone
// surrogate escapes (encoding/json would turn them into U+FFFD), trailing data,
// numbers that are not finite or whose magnitude exceeds 2^53 (beyond it
// distinct integers share one IEEE double, so "same number" is undecidable),
// and number literals longer than MaxNumberLength (docs/fingerprint.md,
// "Numbers").
//
// Changing any of these rules changes fingerprints of stored calls, so it must
// come with a new Version.
package fingerprint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"regexp"
	"sort"
	"strconv"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
	"golang.org/x/text/unicode/norm"
)

// Version is the fingerprint version these rules implement (docs/fingerprint.md,
// "Versioning").
const Version = 1

// MaxDepth bounds the nesting of arrays and objects accepted by ParseJSON and
// Normalize. Tool arguments are flat; the bound keeps recursion shallow for
// hostile input.
const MaxDepth = 64

// MaxValues bounds how many JSON values (scalars, arrays and objects,
// members' values included) ParseJSON accepts in one document. Every value
// costs work at each later step (normalization, canonical form, hashing);
// a 1 MiB body of small members would otherwise cost about a second of CPU
// before any tool could refuse its arguments. Tool arguments are a handful
// of members.
const MaxValues = 10_000

// MaxNumberLength bounds the length in bytes of a number literal (sign,
// digits, point and exponent included) accepted by ParseJSON and Normalize.
// Longer literals are refused with ErrNumberTooLong before any arithmetic:
// deciding whether a literal that rounds to exactly 2^53 lies above it takes
// big-number work that grows with the square of its length (a 1 MiB literal
// cost seconds of CPU). No real argument needs more: a double prints in at
// most 24 characters.
const MaxNumberLength = 100

// MaxExactInteger is 2^53: every integer of at most this magnitude has its own
// IEEE 754 double, so numbers within it compare exactly.
const MaxExactInteger = 1 << 53

// Errors returned (wrapped, with the offending path) by this package.
var (
	// ErrInvalidJSON: not exactly one well-formed JSON value in valid UTF-8.
	ErrInvalidJSON = errors.New("invalid JSON")
	// ErrDuplicateMember: an object has the same member name twice (also
	// after NFC normalization of the names).
	ErrDuplicateMember = errors.New("duplicate member")
	// ErrNumberRange: a number is not finite or its magnitude exceeds 2^53.
	ErrNumberRange = errors.New("number out of range: magnitude above 2^53 or not finite")
	// ErrTooManyValues: a document with more than MaxValues values.
	ErrTooManyValues = errors.New("too many values")
	// ErrNumberTooLong: a number literal longer than MaxNumberLength.
	ErrNumberTooLong = errors.New("number literal too long")
	// ErrUnsupportedType: Normalize was given a Go value that is not a JSON value.
	ErrUnsupportedType = errors.New("unsupported value type")
	// ErrTooDeep: nesting deeper than MaxDepth.
	ErrTooDeep = errors.New("nesting too deep")
)

// ParseJSON decodes exactly one JSON value into generic Go values:
// map[string]any, []any, json.Number, string, bool and nil. Unlike
// json.Unmarshal it refuses duplicate member names at any depth, trailing
// data after the value, invalid UTF-8 and unpaired surrogate escapes. It
// also bounds the work a document can cause: at most MaxDepth levels,
// MaxValues values and MaxNumberLength characters per number.
func ParseJSON(data []byte) (any, error) {
	// encoding/json replaces invalid UTF-8 with U+FFFD without complaint, which
	// would let two different byte strings share a fingerprint.
	if !utf8.Valid(data) {
		return nil, fmt.Errorf("%w: input is not valid UTF-8", ErrInvalidJSON)
	}
	if v, ok := parsePlain(data); ok {
		return v, nil
	}
	return parseTokens(data)
}

// parseTokens is ParseJSON by encoding/json's tokens: every document, and
// the refusals' words.
func parseTokens(data []byte) (any, error) {
	p := parser{dec: json.NewDecoder(bytes.NewReader(data))}
	p.dec.UseNumber() // keep number literals exact; the range check needs them
	v, err := p.value("$", 0)
	if err != nil {
		return nil, err
	}
	if tok, err := p.dec.Token(); err != io.EOF {
		if err == nil {
			return nil, fmt.Errorf("%w: trailing data after the value (%v)", ErrInvalidJSON, tok)
		}
		return nil, fmt.Errorf("%w: trailing data after the value: %v", ErrInvalidJSON, err)
	}
	// Only now, with the syntax known to be good, is every backslash in data
	// the start of an escape inside a string.
	if err := checkSurrogateEscapes(data); err != nil {
		return nil, err
	}
	return v, nil
}

type parser struct {
	dec    *json.Decoder
	values int // values read so far, for MaxValues
}

func (p *parser) token() (json.Token, error) {
	tok, err := p.dec.Token()
	if err == io.EOF {
		return nil, fmt.Errorf("%w: unexpected end of input", ErrInvalidJSON)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidJSON, err)
	}
	return tok, nil
}

func (p *parser) value(path string, depth int) (any, error) {
	tok, err := p.token()
	if err != nil {
		return nil, err
	}
	if p.values++; p.values > MaxValues {
		return nil, fmt.Errorf("%w: more than %d values (at %s)", ErrTooManyValues, MaxValues, path)
	}
	if n, ok := tok.(json.Number); ok {
		if err := checkNumberLength(string(n), path); err != nil {
			return nil, err
		}
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return tok, nil // string, json.Number, bool or nil
	}
	if depth >= MaxDepth {
		return nil, fmt.Errorf("%w: more than %d levels at %s", ErrTooDeep, MaxDepth, path)
	}
	switch delim {
	case '{':
		obj := map[string]any{}
		for p.dec.More() {
			tok, err := p.token()
			if err != nil {
				return nil, err
			}
			name, ok := tok.(string)
			if !ok {
				return nil, fmt.Errorf("%w: member name expected at %s", ErrInvalidJSON, path)
			}
			if _, dup := obj[name]; dup {
				return nil, fmt.Errorf("%w %q at %s", ErrDuplicateMember, name, path)
			}
			v, err := p.value(memberPath(path, name), depth+1)
			if err != nil {
				return nil, err
			}
			obj[name] = v
		}
		if _, err := p.token(); err != nil { // the closing '}'
			return nil, err
		}
		return obj, nil
	case '[':
		arr := []any{}
		for i := 0; p.dec.More(); i++ {
			v, err := p.value(path+"["+strconv.Itoa(i)+"]", depth+1)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		if _, err := p.token(); err != nil { // the closing ']'
			return nil, err
		}
		return arr, nil
	}
	return nil, fmt.Errorf("%w: unexpected %v at %s", ErrInvalidJSON, delim, path)
}

// checkSurrogateEscapes refuses \uD800–\uDFFF escapes that do not form a
// high+low pair: encoding/json decodes them to U+FFFD, so "\ud800" and
// "\ufffd" would otherwise fingerprint alike. data must be valid JSON, where a
// backslash only ever starts an escape inside a string.
func checkSurrogateEscapes(data []byte) error {
	for i := 0; i < len(data); i++ {
		if data[i] != '\\' {
			continue
		}
		if i+1 < len(data) && data[i+1] != 'u' {
			i++ // a two-byte escape such as \" or \\; skip the escaped byte
			continue
		}
		r, ok := hexRune(data, i)
		if !ok {
			return fmt.Errorf("%w: malformed \\u escape at byte %d", ErrInvalidJSON, i)
		}
		i += 5
		switch {
		case r >= 0xD800 && r <= 0xDBFF:
			lo, ok := hexRune(data, i+1)
			if !ok || lo < 0xDC00 || lo > 0xDFFF {
				return fmt.Errorf("%w: unpaired high surrogate escape \\u%04x", ErrInvalidJSON, r)
			}
			i += 6
		case r >= 0xDC00 && r <= 0xDFFF:
			return fmt.Errorf("%w: unpaired low surrogate escape \\u%04x", ErrInvalidJSON, r)
		}
	}
	return nil
}

// hexRune decodes the \uXXXX escape starting at data[i], if there is one.
func hexRune(data []byte, i int) (rune, bool) {
	if i+6 > len(data) || data[i] != '\\' || data[i+1] != 'u' {
		return 0, false
	}
	n, err := strconv.ParseUint(string(data[i+2:i+6]), 16, 32)
	if err != nil {
		return 0, false
	}
	return rune(n), true
}

// memberPath extends a JSONPath-like location ($.args.amount) for messages.
func memberPath(path, name string) string {
	if isIdent(name) {
		return path + "." + name
	}
	return path + "[" + strconv.Quote(name) + "]"
}

// isIdent reports whether name matches ^[A-Za-z_][A-Za-z0-9_]*$ (a
// regular expression cost a tenth of a body's parse: every member's path
// is made).
func isIdent(name string) bool {
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c != '_' && (c < 'A' || c > 'Z') && (c < 'a' || c > 'z') && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return name != ""
}

// Normalize returns a normalized copy of a generic JSON value (as produced by
// ParseJSON; Go numbers and nil maps are accepted too): strings and member
// names in NFC, object members whose value is null removed at every depth
// (nulls inside arrays stay, their position is meaningful), and numbers as
// json.Number after the range check (ErrNumberRange). Member names that only
// collide after NFC are refused as ErrDuplicateMember.
func Normalize(v any) (any, error) {
	return normalize(v, "$", 0)
}

func normalize(v any, path string, depth int) (any, error) {
	switch x := v.(type) {
	case nil:
		return nil, nil
	case bool:
		return x, nil
	case string:
		if !utf8.ValidString(x) {
			return nil, fmt.Errorf("%w: string at %s is not valid UTF-8", ErrInvalidJSON, path)
		}
		return norm.NFC.String(x), nil
	case json.Number:
		return checkNumber(string(x), path)
	case float64:
		return checkFloat(x, path)
	case float32:
		return checkFloat(float64(x), path)
	case int:
		return checkInt(int64(x), path)
	case int64:
		return checkInt(x, path)
	case int32:
		return checkInt(int64(x), path)
	case map[string]any:
		if depth >= MaxDepth {
			return nil, fmt.Errorf("%w: more than %d levels at %s", ErrTooDeep, MaxDepth, path)
		}
		// Sorted so that, with several problems, the same one is reported
		// every time.
		names := make([]string, 0, len(x))
		for name := range x {
			names = append(names, name)
		}
		sort.Strings(names)
		out := make(map[string]any, len(x))
		seen := make(map[string]bool, len(x))
		for _, name := range names {
			if !utf8.ValidString(name) {
				return nil, fmt.Errorf("%w: member name at %s is not valid UTF-8", ErrInvalidJSON, path)
			}
			nfc := norm.NFC.String(name)
			// Checked before dropping nulls: the input named one member twice.
			if seen[nfc] {
				return nil, fmt.Errorf("%w %q at %s (two spellings of the same name after NFC)", ErrDuplicateMember, nfc, path)
			}
			seen[nfc] = true
			if x[name] == nil {
				continue // {"x": null} means the same as {}
			}
			nv, err := normalize(x[name], memberPath(path, nfc), depth+1)
			if err != nil {
				return nil, err
			}
			out[nfc] = nv
		}
		return out, nil
	case []any:
		if depth >= MaxDepth {
			return nil, fmt.Errorf("%w: more than %d levels at %s", ErrTooDeep, MaxDepth, path)
		}
		out := make([]any, len(x))
		for i, e := range x {
			ne, err := normalize(e, path+"["+strconv.Itoa(i)+"]", depth+1)
			if err != nil {
				return nil, err
			}
			out[i] = ne
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w %T at %s", ErrUnsupportedType, v, path)
}

// numberRE is the RFC 8259 number grammar. strconv.ParseFloat alone accepts
// more (hex floats, "Inf", a leading '+', underscores).
var numberRE = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)

var maxExactRat = new(big.Rat).SetInt64(MaxExactInteger)

// checkNumberLength refuses a literal longer than MaxNumberLength. It runs
// before anything else looks at the digits.
func checkNumberLength(lit, path string) error {
	if len(lit) > MaxNumberLength {
		return fmt.Errorf("%w: %s at %s has %d characters; at most %d are accepted",
			ErrNumberTooLong, truncate(lit), path, len(lit), MaxNumberLength)
	}
	return nil
}

// checkNumber validates a JSON number literal and its magnitude.
func checkNumber(lit, path string) (json.Number, error) {
	if err := checkNumberLength(lit, path); err != nil {
		return "", err
	}
	if !numberRE.MatchString(lit) {
		return "", fmt.Errorf("%w: %q at %s is not a JSON number", ErrInvalidJSON, lit, path)
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return "", fmt.Errorf("%w: %s at %s", ErrNumberRange, truncate(lit), path)
	}
	a := math.Abs(f)
	if a > MaxExactInteger {
		return "", fmt.Errorf("%w: %s at %s", ErrNumberRange, truncate(lit), path)
	}
	// Rounding is monotonic, so only a literal that rounds to exactly 2^53
	// can hide a value above it (2^53+1 rounds to 2^53); decide it exactly.
	// big.Rat is quadratic in the literal's length, which checkNumberLength
	// has bounded.
	if a == MaxExactInteger {
		r, ok := new(big.Rat).SetString(lit)
		if !ok || r.Abs(r).Cmp(maxExactRat) > 0 {
			return "", fmt.Errorf("%w: %s at %s", ErrNumberRange, truncate(lit), path)
		}
	}
	return json.Number(lit), nil
}

func checkFloat(f float64, path string) (json.Number, error) {
	if math.IsInf(f, 0) || math.IsNaN(f) || math.Abs(f) > MaxExactInteger {
		return "", fmt.Errorf("%w: %v at %s", ErrNumberRange, f, path)
	}
	return json.Number(strconv.FormatFloat(f, 'g', -1, 64)), nil
}

func checkInt(n int64, path string) (json.Number, error) {
	if n > MaxExactInteger || n < -MaxExactInteger {
		return "", fmt.Errorf("%w: %d at %s", ErrNumberRange, n, path)
	}
	return json.Number(strconv.FormatInt(n, 10)), nil
}

// truncate keeps error messages bounded for absurdly long literals.
func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// Canonical returns the RFC 8785 (JCS) bytes of an already normalized value:
// members sorted by UTF-16 code units, no insignificant whitespace, numbers in
// their ECMAScript shortest form (so 1, 1.0 and 1e0 are all 1).
//
// A normalized value is written directly (appendCanonical); anything else
// (Go numbers, invalid UTF-8, a literal that is not a JSON number) takes
// the general path, json.Marshal and then jcs.Transform, which the direct
// writer matches byte for byte wherever it answers (FuzzCanonical checks
// both on every input).
func Canonical(v any) ([]byte, error) {
	if out, ok := appendCanonical(nil, v, 0); ok {
		return out, nil
	}
	return canonicalJCS(v)
}

// canonicalJCS is Canonical's general path.
func canonicalJCS(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("fingerprint: marshal: %w", err)
	}
	out, err := jcs.Transform(raw)
	if err != nil {
		return nil, fmt.Errorf("fingerprint: canonicalize: %w", err)
	}
	return out, nil
}

// appendCanonical appends the canonical form of a normalized value to buf.
// ok false: v holds something else, and buf is to be dropped.
func appendCanonical(buf []byte, v any, depth int) ([]byte, bool) {
	if depth > MaxDepth+2 { // a normalized call: args inside {"tool", "args"}
		return buf, false
	}
	switch x := v.(type) {
	case nil:
		return append(buf, "null"...), true
	case bool:
		return strconv.AppendBool(buf, x), true
	case string:
		return appendCanonicalString(buf, x)
	case json.Number:
		lit := string(x)
		if len(lit) > MaxNumberLength || !isJSONNumber(lit) {
			return buf, false
		}
		f, err := strconv.ParseFloat(lit, 64)
		if err != nil {
			return buf, false
		}
		n, err := jcs.NumberToJSON(f)
		if err != nil {
			return buf, false
		}
		return append(buf, n...), true
	case []any:
		buf = append(buf, '[')
		for i, e := range x {
			if i > 0 {
				buf = append(buf, ',')
			}
			var ok bool
			if buf, ok = appendCanonical(buf, e, depth+1); !ok {
				return buf, false
			}
		}
		return append(buf, ']'), true
	case map[string]any:
		names := make([]string, 0, len(x))
		for name := range x {
			if !utf8.ValidString(name) {
				return buf, false
			}
			names = append(names, name)
		}
		sort.Slice(names, func(i, j int) bool { return compareUTF16(names[i], names[j]) < 0 })
		buf = append(buf, '{')
		for i, name := range names {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf, _ = appendCanonicalString(buf, name) // valid UTF-8, checked above
			buf = append(buf, ':')
			var ok bool
			if buf, ok = appendCanonical(buf, x[name], depth+1); !ok {
				return buf, false
			}
		}
		return append(buf, '}'), true
	}
	return buf, false
}

// appendCanonicalString writes a string as RFC 8785 §3.2.2.2 does: quotes,
// backslashes and control characters escaped (the two-character escapes
// where JSON has one, else \u00xx in lowercase), every other character as
// itself. ok false for invalid UTF-8.
func appendCanonicalString(buf []byte, s string) ([]byte, bool) {
	if !utf8.ValidString(s) {
		return buf, false
	}
	const hexDigits = "0123456789abcdef"
	buf = append(buf, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"', '\\':
			buf = append(buf, '\\', c)
		case '\b':
			buf = append(buf, '\\', 'b')
		case '\f':
			buf = append(buf, '\\', 'f')
		case '\n':
			buf = append(buf, '\\', 'n')
		case '\r':
			buf = append(buf, '\\', 'r')
		case '\t':
			buf = append(buf, '\\', 't')
		default:
			if c < 0x20 {
				buf = append(buf, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			} else {
				buf = append(buf, c)
			}
		}
	}
	return append(buf, '"'), true
}

// compareUTF16 orders two valid UTF-8 strings by their UTF-16 code units,
// the member order of RFC 8785 §3.2.3. It differs from byte order only
// where a character above U+FFFF (a surrogate pair, 0xD800–0xDFFF) meets
// one in U+E000–U+FFFF.
func compareUTF16(a, b string) int {
	for a != "" && b != "" {
		ra, na := utf8.DecodeRuneInString(a)
		rb, nb := utf8.DecodeRuneInString(b)
		if ra != rb {
			if ua, ub := utf16Unit(ra), utf16Unit(rb); ua != ub {
				return int(ua) - int(ub)
			}
			return int(ra) - int(rb) // one high surrogate: the low ones order as the runes
		}
		a, b = a[na:], b[nb:]
	}
	return len(a) - len(b)
}

// utf16Unit is the first UTF-16 code unit of r. Two different runes with
// the same first unit are both above U+FFFF and share their high
// surrogate; their low surrogates then order as the runes do.
func utf16Unit(r rune) rune {
	if r < 0x10000 {
		return r
	}
	return 0xD800 + (r-0x10000)>>10
}

// isJSONNumber reports whether lit is an RFC 8259 number (numberRE, without
// the regular expression's cost).
func isJSONNumber(lit string) bool {
	i := 0
	if i < len(lit) && lit[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(lit) && lit[i] >= '0' && lit[i] <= '9' {
			i++
			n++
		}
		return n
	}
	switch {
	case i < len(lit) && lit[i] == '0':
		i++
	case digits() == 0:
		return false
	}
	if i < len(lit) && lit[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(lit) && (lit[i] == 'e' || lit[i] == 'E') {
		i++
		if i < len(lit) && (lit[i] == '+' || lit[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(lit)
}

// Of returns the version 1 fingerprint of a tool call: the lowercase hex
// SHA-256 of the canonical JSON of the normalized {"tool": tool, "args": args}.
// A nil args is the empty object. client_id and seq are deliberately not part
// of it (docs/fingerprint.md, "What is fingerprinted").
func Of(tool string, args map[string]any) (string, error) {
	if args == nil {
		args = map[string]any{}
	}
	n, err := Normalize(map[string]any{"tool": tool, "args": args})
	if err != nil {
		return "", err
	}
	c, err := Canonical(n)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(c)
	return hex.EncodeToString(sum[:]), nil
}

// OfNormalized is Of(tool, args) for args that Normalize has returned
// already, with canonicalArgs their Canonical form: neither is done again.
// The canonical form of {"tool", "args"} is "args" and then "tool" (they
// sort so), each member's value in its canonical form. Normalizing the
// normalized args again inside {"tool", "args"} could only refuse them for
// their depth, one level deeper there than on their own: args that come
// near MaxDepth are given to Of, which decides and words the refusal.
func OfNormalized(tool string, args map[string]any, canonicalArgs []byte) (string, error) {
	if nesting(canonicalArgs) >= MaxDepth-1 {
		return Of(tool, args)
	}
	if !utf8.ValidString(tool) {
		return "", fmt.Errorf("%w: string at $.tool is not valid UTF-8", ErrInvalidJSON)
	}
	h := sha256.New()
	buf := make([]byte, 0, len(`{"args":,"tool":""}`)+len(tool)+8)
	buf = append(buf, `{"args":`...)
	h.Write(buf)
	h.Write(canonicalArgs)
	buf = append(buf[:0], `,"tool":`...)
	buf, _ = appendCanonicalString(buf, norm.NFC.String(tool))
	buf = append(buf, '}')
	h.Write(buf)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// nesting is the deepest nesting of arrays and objects in a JSON text (1
// for "{}"), brackets inside strings not counted.
func nesting(data []byte) int {
	depth, deepest, inString := 0, 0, false
	for i := 0; i < len(data); i++ {
		switch c := data[i]; {
		case inString && c == '\\':
			i++ // the escaped byte
		case c == '"':
			inString = !inString
		case inString:
		case c == '{' || c == '[':
			depth++
			deepest = max(deepest, depth)
		case c == '}' || c == ']':
			depth--
		}
	}
	return deepest
}
