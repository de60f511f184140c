package fingerprint

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// documentedErrors are the refusals ParseJSON and Normalize may give for a
// document (ErrUnsupportedType is for Go values that are not JSON, which a
// parsed document never holds).
var documentedErrors = []error{ErrInvalidJSON, ErrDuplicateMember, ErrNumberRange,
	ErrTooManyValues, ErrNumberTooLong, ErrTooDeep}

func checkDocumented(t *testing.T, step string, err error) {
	t.Helper()
	for _, want := range documentedErrors {
		if errors.Is(err, want) {
			return
		}
	}
	t.Fatalf("%s refused with an undocumented error: %v", step, err)
}

// FuzzCanonical checks the canonicalizer's properties on any input: no
// panic; a refusal is one of the documented errors; canonicalizing the
// canonical form again changes nothing; and another spelling of the same
// value (members in another order, numbers re-spelled as the same double,
// strings in NFD, other escapes, whitespace) has the same canonical form and
// the same fingerprint. Run it longer with
// go test -run='^$' -fuzz='^FuzzCanonical$' -fuzztime=5m ./internal/fingerprint
func FuzzCanonical(f *testing.F) {
	seeds := []string{
		`{"tool":"charge","args":{"amount":100}}`,
		`{"b":1,"a":[1.0,1e0,10e-1,0.1e1,-0,0.0,-0.0]}`,
		`{"x":null,"y":[null,{"z":null}],"w":false,"v":true}`,
		strings.Repeat(`{"a":`, MaxDepth-1) + `1` + strings.Repeat(`}`, MaxDepth-1),
		strings.Repeat(`[`, MaxDepth) + strings.Repeat(`]`, MaxDepth),
		strings.Repeat(`[`, MaxDepth+1) + strings.Repeat(`]`, MaxDepth+1),
		`[` + paddedNumber("1", MaxNumberLength) + `]`,
		`[` + paddedNumber("1", MaxNumberLength+1) + `]`,
		`[0.1000000000000000055511151231257827021181583404541015625]`,
		`[123456789012345678901234567890e-20]`,
		"{\"caf\u00e9\":\"caf\u00e9\"}",
		"{\"cafe\u0301\":\"cafe\u0301\"}",
		"{\"caf\u00e9\":1,\"cafe\u0301\":2}",
		"[\"\u1100\u1161\u11a8\",\"\uac01\",\"a\u0328\u0301\u0323\"]",
		`{"a":1,"a":2}`,
		`{"a":null,"a":null}`,
		`{"s":"\u0061","\u0073":1}`,
		`["\ud800"]`,
		`["\udc00"]`,
		`["\ud83d\ude00","\\ud800"]`,
		`["\ud800\ud800"]`,
		`[9007199254740992,-9007199254740992,9007199254740991]`,
		`[9007199254740993]`,
		`[9007199254740992.0000000001]`,
		`[9.007199254740992e15,9007199254740992e0]`,
		`[1e400,-1e400,1e-400,5e-324,2.2250738585072014e-308]`,
		`["\u0000","a\u0000b"]`,
		"{\"\\u0000\":0}",
		"[\"\xff\"]",
		`[1,2,3] x`,
		`{}{}`,
		``,
		` `,
		`"<&>\u2028\u2029\t\n\"\\/"`,
		`[true,false,null,"",0,{},[]]`,
		// The plain parser's edges: each is refused or handed on.
		` { "a" : 1 , "b" : [ 1 , 2 ] } `, `{"a":tru}`, `[1true]`, `{"a" 1}`, `[01]`, `[-]`, `[1.]`, `[.5]`,
		"[\"a\tb\"]", `{"a":"b",}`, `[1,]`, `nullx`, `"x"`, `[1e5,-0,0.5E-3]`, `{"a":{}}x`, `{"a"}`, `{1:2}`,
		`["a\"b"]`, "[1]\x00", `[nul]`, "\ufeff[1]",
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// The plain parser accepts only what encoding/json's tokens accept,
		// as the same value.
		if pv, ok := parsePlain(data); ok && utf8.Valid(data) {
			tv, err := parseTokens(data)
			if err != nil || !reflect.DeepEqual(pv, tv) {
				t.Fatalf("parsePlain accepted %q as %#v; parseTokens: %#v, %v", data, pv, tv, err)
			}
		}
		v, err := ParseJSON(data)
		if err != nil {
			checkDocumented(t, "ParseJSON", err)
			return
		}
		n, err := Normalize(v)
		if err != nil {
			checkDocumented(t, "Normalize", err)
			return
		}
		c1, err := Canonical(n)
		if err != nil {
			t.Fatalf("Canonical refused a normalized value: %v", err)
		}
		fp := fingerprintOf(v)

		// The direct writer is the general path, byte for byte, on the
		// normalized value and on the parsed one (not NFC, nulls kept).
		for _, x := range []any{n, v} {
			direct, derr := Canonical(x)
			general, gerr := canonicalJCS(x)
			if !bytes.Equal(direct, general) || (derr == nil) != (gerr == nil) {
				t.Fatalf("Canonical and json.Marshal+jcs.Transform differ on %q:\n%q %v\n%q %v", data, direct, derr, general, gerr)
			}
		}
		// OfNormalized on the canonical args is Of.
		if na, err := Normalize(map[string]any{"v": v}); err == nil {
			ca, err := Canonical(na)
			if err != nil {
				t.Fatalf("Canonical refused normalized args: %v", err)
			}
			want, werr := Of("fuzz", map[string]any{"v": v})
			got, err := OfNormalized("fuzz", na.(map[string]any), ca)
			if got != want || (err == nil) != (werr == nil) || (err != nil && err.Error() != werr.Error()) {
				t.Fatalf("OfNormalized = %s, %v; Of = %s, %v (input %q)", got, err, want, werr, data)
			}
		}

		// Idempotent: the canonical form is its own canonical form.
		c2 := canonicalOf(t, "the canonical form", c1)
		if !bytes.Equal(c1, c2) {
			t.Fatalf("canonicalizing twice changed the result:\n%s\n%s", c1, c2)
		}

		// Other spellings of the same value.
		for variant := range numberSpellings {
			var alt bytes.Buffer
			respell(&alt, n, variant)
			c3 := canonicalOf(t, "a re-spelling", alt.Bytes())
			if !bytes.Equal(c1, c3) {
				t.Fatalf("a re-spelling changed the canonical form:\ninput   %q\nrespelt %q\n%s\n%s", data, alt.Bytes(), c1, c3)
			}
			v3, _ := ParseJSON(alt.Bytes()) // accepted by canonicalOf
			if fp3 := fingerprintOf(v3); fp3 != fp {
				t.Fatalf("a re-spelling changed the fingerprint: %s vs %s\ninput   %q\nrespelt %q", fp, fp3, data, alt.Bytes())
			}
		}
	})
}

// canonicalOf parses, normalizes and canonicalizes data, which must be
// accepted.
func canonicalOf(t *testing.T, what string, data []byte) []byte {
	t.Helper()
	v, err := ParseJSON(data)
	if err != nil {
		t.Fatalf("ParseJSON refused %s %q: %v", what, data, err)
	}
	n, err := Normalize(v)
	if err != nil {
		t.Fatalf("Normalize refused %s %q: %v", what, data, err)
	}
	c, err := Canonical(n)
	if err != nil {
		t.Fatalf("Canonical refused %s %q: %v", what, data, err)
	}
	return c
}

// fingerprintOf is the fingerprint of a call with v as the value of its one
// argument, or the refusal's sentinel name: nesting v two levels deeper may
// cross MaxDepth, and then both spellings must be refused alike.
func fingerprintOf(v any) string {
	fp, err := Of("fuzz", map[string]any{"v": v})
	if err != nil {
		for _, e := range documentedErrors {
			if errors.Is(err, e) {
				return "refused: " + e.Error()
			}
		}
		return "refused: " + err.Error()
	}
	return fp
}

// numberSpellings is how many ways respell writes a number.
const numberSpellings = 4

// respell writes a normalized value as JSON in another spelling: object
// members in reverse sorted order, strings and names in NFD with every
// non-ASCII character escaped, whitespace around tokens, and numbers in the
// spelling chosen by variant — all the same value.
func respell(buf *bytes.Buffer, v any, variant int) {
	switch x := v.(type) {
	case nil:
		buf.WriteString(" null ")
	case bool:
		buf.WriteString(" " + strconv.FormatBool(x) + " ")
	case string:
		writeString(buf, x)
	case json.Number:
		buf.WriteString(" " + spellNumber(string(x), variant) + " ")
	case []any:
		buf.WriteString("[ ")
		for i, e := range x {
			if i > 0 {
				buf.WriteString(" ,\n")
			}
			respell(buf, e, variant)
		}
		buf.WriteString("\t]")
	case map[string]any:
		names := make([]string, 0, len(x))
		for name := range x {
			names = append(names, name)
		}
		slices.Sort(names)
		slices.Reverse(names)
		buf.WriteString("{ ")
		for i, name := range names {
			if i > 0 {
				buf.WriteString(" , ")
			}
			writeString(buf, name)
			buf.WriteString(" : ")
			respell(buf, x[name], variant)
		}
		buf.WriteString("\r}")
	default:
		panic("respell: not a normalized value")
	}
}

// writeString writes s in NFD, escaping every non-ASCII character as \u
// (surrogate pairs above the BMP).
func writeString(buf *bytes.Buffer, s string) {
	buf.WriteByte('"')
	for _, r := range norm.NFD.String(s) {
		switch {
		case r == '"' || r == '\\':
			buf.WriteByte('\\')
			buf.WriteRune(r)
		case r < 0x20 || r >= 0x7f && r <= 0xffff:
			buf.WriteString(`\u` + hex4(int(r)))
		case r > 0xffff:
			r -= 0x10000
			buf.WriteString(`\u` + hex4(0xd800+int(r>>10)) + `\u` + hex4(0xdc00+int(r&0x3ff)))
		default:
			buf.WriteRune(r)
		}
	}
	buf.WriteByte('"')
}

func hex4(n int) string {
	s := strconv.FormatInt(int64(n), 16)
	return strings.Repeat("0", 4-len(s)) + s
}

// spellNumber returns another literal for the double lit denotes:
// 0 the shortest exponent form (1e+00), 1 an integer mantissa (15e-1),
// 2 that mantissa times ten (150e-2), 3 the shortest form with ".0" or an
// upper-case E.
func spellNumber(lit string, variant int) string {
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil {
		panic("spellNumber: " + lit + " was accepted by Normalize but " + err.Error())
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // -d.ddde±XX
	mant, exp, _ := strings.Cut(e, "e")
	x, _ := strconv.Atoi(exp)
	intPart, frac, _ := strings.Cut(mant, ".")
	switch variant {
	case 0:
		return e
	case 1:
		return intPart + frac + "e" + strconv.Itoa(x-len(frac))
	case 2:
		if f == 0 {
			return intPart + ".00e-7" // 0 has no mantissa to multiply
		}
		return intPart + frac + "0e" + strconv.Itoa(x-len(frac)-1)
	default:
		g := strconv.FormatFloat(f, 'g', -1, 64)
		if strings.ContainsAny(g, "e.") {
			return strings.ToUpper(g)
		}
		return g + ".0"
	}
}
