package fingerprint

import (
	"bytes"
	"encoding/json"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// fpOfBody parses a request-like body {"tool":..., "args":...} the way the
// server does and returns its fingerprint.
func fpOfBody(t *testing.T, body string) (string, error) {
	t.Helper()
	v, err := ParseJSON([]byte(body))
	if err != nil {
		return "", err
	}
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("body %s is not an object", body)
	}
	// A body without a string tool or with a non-object args would be
	// fingerprinted as tool "" or args {} and compare equal to others.
	tool, ok := m["tool"].(string)
	if !ok {
		t.Fatalf("body %s has no string tool", body)
	}
	args, ok := m["args"].(map[string]any)
	if raw, present := m["args"]; present && raw != nil && !ok { // null is the server's {}
		t.Fatalf("body %s: args is not an object", body)
	}
	return Of(tool, args)
}

// TestGoldenVersion1 pins version 1: the value was computed outside Go with
//
//	printf '%s' '{"args":{"amount":100},"tool":"charge"}' | sha256sum
func TestGoldenVersion1(t *testing.T) {
	const golden = "c136471529280eb4c70db92d5b8ff8d553408953a5794966a81ad3d42c83ec5d"
	got, err := Of("charge", map[string]any{"amount": json.Number("100")})
	if err != nil {
		t.Fatal(err)
	}
	if got != golden {
		t.Fatalf("Of(charge, amount=100) = %s, want %s", got, golden)
	}
	if Version != 1 {
		t.Fatalf("Version = %d; a new version needs a new golden value", Version)
	}
}

// TestSameFingerprint: each group of bodies spells the same call differently
// and must give one fingerprint (docs/fingerprint.md, "Canonical JSON").
func TestSameFingerprint(t *testing.T) {
	groups := []struct {
		name   string
		bodies []string
	}{
		{"key order", []string{
			`{"tool":"send_email","args":{"to":"a@b","subject":"s","body":"b"}}`,
			`{"args":{"body":"b","subject":"s","to":"a@b"},"tool":"send_email"}`,
		}},
		{"whitespace", []string{
			`{"tool":"charge","args":{"amount":100}}`,
			" {\n\t\"tool\" : \"charge\" ,\r\n \"args\" : { \"amount\" : 100 } } \n",
		}},
		{"1 vs 1.0 vs 1e0", []string{
			`{"tool":"charge","args":{"amount":1}}`,
			`{"tool":"charge","args":{"amount":1.0}}`,
			`{"tool":"charge","args":{"amount":1e0}}`,
			`{"tool":"charge","args":{"amount":10E-1}}`,
			`{"tool":"charge","args":{"amount":0.1e1}}`,
		}},
		{"negative zero", []string{
			`{"tool":"t","args":{"n":0}}`,
			`{"tool":"t","args":{"n":-0}}`,
			`{"tool":"t","args":{"n":-0.0}}`,
		}},
		{"NFC vs NFD in values", []string{
			`{"tool":"send_email","args":{"to":"ren\u00e9@x"}}`,
			`{"tool":"send_email","args":{"to":"rene\u0301@x"}}`,
			"{\"tool\":\"send_email\",\"args\":{\"to\":\"ren\u00e9@x\"}}",
			"{\"tool\":\"send_email\",\"args\":{\"to\":\"rene\u0301@x\"}}",
		}},
		{"NFC vs NFD in keys", []string{
			`{"tool":"t","args":{"caf\u00e9":1}}`,
			`{"tool":"t","args":{"cafe\u0301":1}}`,
		}},
		{"NFC vs NFD in tool", []string{
			`{"tool":"caf\u00e9","args":{}}`,
			`{"tool":"cafe\u0301","args":{}}`,
		}},
		{"null member vs absent", []string{
			`{"tool":"charge","args":{"amount":5}}`,
			`{"tool":"charge","args":{"amount":5,"x":null}}`,
		}},
		{"nested nulls", []string{
			`{"tool":"t","args":{"a":{"b":null,"c":{"d":null}},"e":[{"f":null}]}}`,
			`{"tool":"t","args":{"a":{"c":{}},"e":[{}]}}`,
		}},
		{"absent args vs empty args vs null args", []string{
			`{"tool":"t"}`,
			`{"tool":"t","args":{}}`,
			`{"tool":"t","args":null}`,
		}},
		{"escapes", []string{
			`{"tool":"t","args":{"s":"<&>\/"}}`,
			`{"tool":"t","args":{"s":"\u003c\u0026\u003e/"}}`,
		}},
		{"2^53 spelled differently", []string{
			`{"tool":"t","args":{"n":9007199254740992}}`,
			`{"tool":"t","args":{"n":9.007199254740992e15}}`,
			`{"tool":"t","args":{"n":9007199254740992.0}}`,
		}},
	}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			want, err := fpOfBody(t, g.bodies[0])
			if err != nil {
				t.Fatalf("%s: %v", g.bodies[0], err)
			}
			for _, b := range g.bodies[1:] {
				got, err := fpOfBody(t, b)
				if err != nil {
					t.Fatalf("%s: %v", b, err)
				}
				if got != want {
					t.Errorf("fingerprint of %s = %s, want %s (same as %s)", b, got, want, g.bodies[0])
				}
			}
		})
	}
}

// TestDifferentFingerprint: calls that differ in meaning must not collide.
func TestDifferentFingerprint(t *testing.T) {
	bodies := []string{
		`{"tool":"charge","args":{"amount":100}}`,
		`{"tool":"charge","args":{"amount":101}}`,
		`{"tool":"charge","args":{"amount":"100"}}`,
		`{"tool":"charge","args":{"amount":100.5}}`,
		`{"tool":"charge","args":{}}`,
		`{"tool":"send_email","args":{"amount":100}}`,
		`{"tool":"charge","args":{"amount":100,"extra":false}}`,
		`{"tool":"charge","args":{"Amount":100}}`,
		`{"tool":"t","args":{"a":[null]}}`,
		`{"tool":"t","args":{"a":[]}}`,
		`{"tool":"t","args":{"a":{}}}`,
		`{"tool":"t","args":{"a":[1,2]}}`,
		`{"tool":"t","args":{"a":[2,1]}}`,
		`{"tool":"t","args":{"s":"e\u0301"}}`, // NFC é
		`{"tool":"t","args":{"s":"e"}}`,
		`{"tool":"t","args":{"n":9007199254740991}}`,
		`{"tool":"t","args":{"n":9007199254740992}}`,
		`{"tool":"t","args":{"n":-9007199254740992}}`,
	}
	seen := map[string]string{}
	for _, b := range bodies {
		fp, err := fpOfBody(t, b)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if prev, ok := seen[fp]; ok {
			t.Errorf("%s and %s share fingerprint %s", prev, b, fp)
		}
		seen[fp] = b
	}
}

// TestRefused: inputs that cannot be fingerprinted unambiguously.
func TestRefused(t *testing.T) {
	cases := []struct {
		name    string
		body    string
		want    error
		message string // substring of the error, when the wording matters
	}{
		{"2^53+1", `{"tool":"t","args":{"n":9007199254740993}}`, ErrNumberRange, "$.args.n"},
		{"-2^53-1", `{"tool":"t","args":{"n":-9007199254740993}}`, ErrNumberRange, "$.args.n"},
		{"2^53 plus a fraction", `{"tool":"t","args":{"n":9007199254740992.5}}`, ErrNumberRange, ""},
		{"2^53+1 as exponent", `{"tool":"t","args":{"n":9.007199254740993e15}}`, ErrNumberRange, ""},
		{"1e400", `{"tool":"t","args":{"n":1e400}}`, ErrNumberRange, ""},
		{"-1e400", `{"tool":"t","args":{"n":-1e400}}`, ErrNumberRange, ""},
		{"1e16", `{"tool":"t","args":{"n":1e16}}`, ErrNumberRange, ""},
		{"big number in array", `{"tool":"t","args":{"a":[1,2,1e300]}}`, ErrNumberRange, "$.args.a[2]"},
		{"duplicate at top level", `{"tool":"t","tool":"u","args":{}}`, ErrDuplicateMember, `duplicate member "tool" at $`},
		{"duplicate in args", `{"tool":"t","args":{"x":1,"x":1}}`, ErrDuplicateMember, `duplicate member "x" at $.args`},
		{"duplicate nested", `{"tool":"t","args":{"a":[{"b":{"y":1,"y":2}}]}}`, ErrDuplicateMember, `duplicate member "y" at $.args.a[0].b`},
		{"duplicate with null", `{"tool":"t","args":{"x":null,"x":1}}`, ErrDuplicateMember, ""},
		{"duplicate after NFC", `{"tool":"t","args":{"caf\u00e9":1,"cafe\u0301":2}}`, ErrDuplicateMember, `"café" at $.args`},
		{"trailing garbage", `{"tool":"t","args":{}} x`, ErrInvalidJSON, "trailing"},
		{"second value", `{"tool":"t","args":{}}{}`, ErrInvalidJSON, "trailing"},
		{"trailing brace", `{"tool":"t","args":{}}}`, ErrInvalidJSON, "trailing"},
		{"empty", ``, ErrInvalidJSON, ""},
		{"truncated", `{"tool":"t","args":{`, ErrInvalidJSON, ""},
		{"invalid UTF-8", "{\"tool\":\"t\",\"args\":{\"s\":\"\xff\"}}", ErrInvalidJSON, "UTF-8"},
		{"lone high surrogate", `{"tool":"t","args":{"s":"\ud800"}}`, ErrInvalidJSON, "surrogate"},
		{"lone low surrogate", `{"tool":"t","args":{"s":"\udc00x"}}`, ErrInvalidJSON, "surrogate"},
		{"reversed surrogates", `{"tool":"t","args":{"s":"\udc00\ud800"}}`, ErrInvalidJSON, "surrogate"},
		{"NaN literal", `{"tool":"t","args":{"n":NaN}}`, ErrInvalidJSON, ""},
		{"too deep", `{"tool":"t","args":{"a":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}}`, ErrTooDeep, ""},
		{"101-character number", `{"tool":"t","args":{"n":` + paddedNumber("1", MaxNumberLength+1) + `}}`, ErrNumberTooLong, "$.args.n"},
		{"huge exponent", `{"tool":"t","args":{"n":1e999999999}}`, ErrNumberRange, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fp, err := fpOfBody(t, c.body)
			if err == nil {
				t.Fatalf("accepted %q with fingerprint %s", c.body, fp)
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("error %q does not wrap %q", err, c.want)
			}
			if c.message != "" && !strings.Contains(err.Error(), c.message) {
				t.Errorf("error %q does not mention %q", err, c.message)
			}
		})
	}
}

// paddedNumber returns lit followed by ".000…" up to n characters (lit must
// have no point), so the value stays lit's.
func paddedNumber(lit string, n int) string {
	return lit + "." + strings.Repeat("0", n-len(lit)-1)
}

// TestLongNumberRefusedBeforeArithmetic: a literal that rounds to exactly
// 2^53 needs exact (big.Rat) arithmetic to be judged, which is quadratic in
// its length. One of 1 MiB must be refused by its length alone — by
// ParseJSON, and by Normalize for values that did not come through it —
// never reach that arithmetic (it would report ErrNumberRange, seconds
// later).
func TestLongNumberRefusedBeforeArithmetic(t *testing.T) {
	huge := "9007199254740992." + strings.Repeat("0", 1<<20) + "1" // rounds to 2^53, lies above it
	_, err := ParseJSON([]byte(`{"n":` + huge + `}`))
	if !errors.Is(err, ErrNumberTooLong) {
		t.Fatalf("ParseJSON of a 1 MiB number: %v, want ErrNumberTooLong", err)
	}
	if len(err.Error()) > 200 {
		t.Errorf("error message of %d bytes quotes the literal", len(err.Error()))
	}
	_, err = Normalize(map[string]any{"n": json.Number(huge)})
	if !errors.Is(err, ErrNumberTooLong) {
		t.Fatalf("Normalize of a 1 MiB number: %v, want ErrNumberTooLong", err)
	}
}

// TestNumberLengthLimit: MaxNumberLength characters are accepted and still
// judged exactly; one more is refused.
func TestNumberLengthLimit(t *testing.T) {
	atLimit := paddedNumber("9007199254740992", MaxNumberLength)
	if _, err := fpOfBody(t, `{"tool":"t","args":{"n":`+atLimit+`}}`); err != nil {
		t.Errorf("%d-character 2^53 refused: %v", len(atLimit), err)
	}
	above := atLimit[:len(atLimit)-1] + "1" // still MaxNumberLength characters, now above 2^53
	if _, err := fpOfBody(t, `{"tool":"t","args":{"n":`+above+`}}`); !errors.Is(err, ErrNumberRange) {
		t.Errorf("%d-character literal above 2^53: %v, want ErrNumberRange", len(above), err)
	}
	if _, err := fpOfBody(t, `{"tool":"t","args":{"n":`+atLimit+`0}}`); !errors.Is(err, ErrNumberTooLong) {
		t.Errorf("%d-character literal: %v, want ErrNumberTooLong", len(atLimit)+1, err)
	}
}

// BenchmarkLongNumber measures the refusal of a 1 MiB literal that rounds
// to 2^53 (before the length limit: seconds per operation).
func BenchmarkLongNumber(b *testing.B) {
	body := []byte(`{"n":9007199254740992.` + strings.Repeat("0", 1<<20) + `1}`)
	for b.Loop() {
		if _, err := ParseJSON(body); !errors.Is(err, ErrNumberTooLong) {
			b.Fatal(err)
		}
	}
}

// wideBody is a body of about size bytes whose args has many small members.
func wideBody(size int) []byte {
	var sb strings.Builder
	sb.WriteString(`{"tool":"t","args":{`)
	for i := 0; sb.Len() < size-64; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`"k` + strconv.Itoa(i) + `":` + strconv.Itoa(i))
	}
	sb.WriteString(`}}`)
	return []byte(sb.String())
}

// TestValueCountLimit: MaxValues values are accepted, one more is refused,
// and a 1 MiB body of small members (some 110,000 values, about a second of
// CPU through normalization and canonical form) is refused by the count
// while parsing.
func TestValueCountLimit(t *testing.T) {
	array := func(n int) []byte { // an object and an array: n+2 values
		return []byte(`{"a":[` + strings.TrimSuffix(strings.Repeat("0,", n), ",") + `]}`)
	}
	if _, err := ParseJSON(array(MaxValues - 2)); err != nil {
		t.Fatalf("%d values refused: %v", MaxValues, err)
	}
	if _, err := ParseJSON(array(MaxValues - 1)); !errors.Is(err, ErrTooManyValues) {
		t.Fatalf("%d values: %v, want ErrTooManyValues", MaxValues+1, err)
	}
	if _, err := ParseJSON(wideBody(1 << 20)); !errors.Is(err, ErrTooManyValues) {
		t.Fatalf("1 MiB of members: %v, want ErrTooManyValues", err)
	}
}

// BenchmarkWideBody measures the refusal of a 1 MiB body of many members
// (before MaxValues: about a second per request through Of).
func BenchmarkWideBody(b *testing.B) {
	body := wideBody(1 << 20)
	for b.Loop() {
		if _, err := ParseJSON(body); !errors.Is(err, ErrTooManyValues) {
			b.Fatal(err)
		}
	}
}

// BenchmarkLargestAccepted measures the most values a body may have, all
// the way to a fingerprint: the bound on work per accepted request.
func BenchmarkLargestAccepted(b *testing.B) {
	body := []byte(`{"tool":"t","args":{"a":[` + strings.TrimSuffix(strings.Repeat("0.5,", MaxValues-4), ",") + `]}}`)
	for b.Loop() {
		v, err := ParseJSON(body)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Of("t", v.(map[string]any)["args"].(map[string]any)); err != nil {
			b.Fatal(err)
		}
	}
}

func TestSurrogatePairAccepted(t *testing.T) {
	a, err := fpOfBody(t, `{"tool":"t","args":{"s":"\ud83d\ude00"}}`)
	if err != nil {
		t.Fatal(err)
	}
	b, err := fpOfBody(t, "{\"tool\":\"t\",\"args\":{\"s\":\"\U0001F600\"}}")
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Errorf("escaped and raw U+1F600 differ: %s vs %s", a, b)
	}
	// An escaped backslash followed by "ud800" is text, not an escape.
	if _, err := fpOfBody(t, `{"tool":"t","args":{"s":"\\ud800"}}`); err != nil {
		t.Errorf("escaped backslash refused: %v", err)
	}
}

func TestBoundariesAccepted(t *testing.T) {
	for _, n := range []string{"9007199254740992", "-9007199254740992", "9007199254740991", "1e-400", "0.1", "1.5e15"} {
		if _, err := fpOfBody(t, `{"tool":"t","args":{"n":`+n+`}}`); err != nil {
			t.Errorf("%s refused: %v", n, err)
		}
	}
}

func TestNormalizeKeepsArrayNullsAndDropsMemberNulls(t *testing.T) {
	v, err := ParseJSON([]byte(`{"a":[null,1,{"b":null}],"c":null,"d":"e\u0301"}`))
	if err != nil {
		t.Fatal(err)
	}
	n, err := Normalize(v)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Canonical(n)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"a":[null,1,{}],"d":"é"}`; string(c) != want {
		t.Errorf("Canonical = %s, want %s", c, want)
	}
	// Normalize returns a copy: the input still has its null member.
	if _, ok := v.(map[string]any)["c"]; !ok {
		t.Error("Normalize modified its input")
	}
}

func TestNormalizeGoValues(t *testing.T) {
	a, err := Of("charge", map[string]any{"amount": 100})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Of("charge", map[string]any{"amount": 100.0})
	if err != nil {
		t.Fatal(err)
	}
	c, err := Of("charge", map[string]any{"amount": json.Number("1e2")})
	if err != nil {
		t.Fatal(err)
	}
	if a != b || b != c {
		t.Errorf("int, float64 and json.Number 100 differ: %s %s %s", a, b, c)
	}
	nilArgs, err := Of("t", nil)
	if err != nil {
		t.Fatal(err)
	}
	empty, err := Of("t", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	if nilArgs != empty {
		t.Error("nil args and empty args differ")
	}
	for _, bad := range []any{json.Number("0x10"), json.Number("+1"), json.Number("Inf"), struct{}{}, int64(1<<53 + 1)} {
		if _, err := Of("t", map[string]any{"v": bad}); err == nil {
			t.Errorf("Of accepted %#v", bad)
		}
	}
}

func TestParseJSONTypes(t *testing.T) {
	v, err := ParseJSON([]byte(`{"n":1.50,"s":"x","b":true,"z":null,"a":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	m := v.(map[string]any)
	if n, ok := m["n"].(json.Number); !ok || n != "1.50" {
		t.Errorf("n = %#v, want json.Number(\"1.50\")", m["n"])
	}
	if m["s"] != "x" || m["b"] != true || m["z"] != nil {
		t.Errorf("unexpected values: %#v", m)
	}
	if a, ok := m["a"].([]any); !ok || len(a) != 0 {
		t.Errorf("a = %#v, want empty []any", m["a"])
	}
	if v, err := ParseJSON([]byte(` 42 `)); err != nil || v != json.Number("42") {
		t.Errorf("scalar: %#v, %v", v, err)
	}
}

// FuzzParseNormalize checks that no input panics and that whatever is
// accepted canonicalizes to a fixed point: parsing the canonical bytes again
// gives the same canonical bytes.
func FuzzParseNormalize(f *testing.F) {
	for _, s := range []string{
		`{"tool":"charge","args":{"amount":100}}`,
		`{"a":{"b":null},"c":[null,1.0,1e0,-0]}`,
		`{"caf\u00e9":1,"cafe\u0301":2}`,
		`{"x":1,"x":2}`,
		`"\ud83d\ude00"`,
		`"\ud800"`,
		`9007199254740993`,
		`1e400`,
		`[[[[[]]]]]`,
		"\"\xff\"",
		`{} x`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := ParseJSON(data)
		if err != nil {
			return
		}
		n, err := Normalize(v)
		if err != nil {
			return
		}
		c1, err := Canonical(n)
		if err != nil {
			t.Fatalf("Canonical of normalized %q: %v", data, err)
		}
		v2, err := ParseJSON(c1)
		if err != nil {
			t.Fatalf("canonical output %q does not parse: %v", c1, err)
		}
		n2, err := Normalize(v2)
		if err != nil {
			t.Fatalf("canonical output %q does not normalize: %v", c1, err)
		}
		c2, err := Canonical(n2)
		if err != nil {
			t.Fatal(err)
		}
		if string(c1) != string(c2) {
			t.Fatalf("not a fixed point: %q -> %q", c1, c2)
		}
	})
}

// TestCanonicalDirect: the direct writer agrees with json.Marshal and
// jcs.Transform where they could part: member order across the surrogate
// range, one high surrogate shared, escapes, HTML characters, the line
// separators, numbers at the ECMAScript format's edges; and a value that
// is not normalized takes the general path.
func TestCanonicalDirect(t *testing.T) {
	for _, v := range []any{
		map[string]any{"\U0001F600": json.Number("1"), "\uE000": json.Number("2"), "\uFFFF": json.Number("3"),
			"z": json.Number("4"), "\U0001F601": json.Number("5"), "\U0001F4A9": json.Number("6"), "": json.Number("7"),
			"\U0001F600\U0001F601": json.Number("8"), "\U0001F600\U0001F600": json.Number("9")},
		[]any{"\"\\\b\f\n\r\t\x00\x01\x1f\x7f<>&\u2028\u2029/é\U0001F600"},
		[]any{json.Number("-0"), json.Number("1e21"), json.Number("1e20"), json.Number("1e-6"), json.Number("1e-7"),
			json.Number("0.1"), json.Number("9007199254740992"), json.Number("5e-324"), json.Number("1E+2")},
		[]any{nil, true, false, map[string]any{}, []any{}},
		map[string]any{"float": 1.5, "int": 3},        // Go numbers: the general path
		[]any{json.Number("0x10"), json.Number("01")}, // not JSON numbers: both refuse
		[]any{"\xff"}, // invalid UTF-8: the general path
	} {
		direct, derr := Canonical(v)
		general, gerr := canonicalJCS(v)
		if !bytes.Equal(direct, general) || (derr == nil) != (gerr == nil) {
			t.Errorf("%#v:\n direct  %q %v\n general %q %v", v, direct, derr, general, gerr)
		}
	}
	if out, ok := appendCanonical(nil, map[string]any{"b": json.Number("1.0"), "a": "x"}, 0); !ok || string(out) != `{"a":"x","b":1}` {
		t.Errorf("direct writer: %q %v", out, ok)
	}
}

// TestOfNormalized: the fingerprint from canonical args is Of's, the pinned
// example's included, and so is the refusal of args nested one level too
// deep for the call.
func TestOfNormalized(t *testing.T) {
	for _, tc := range []struct {
		tool string
		args map[string]any
	}{
		{"charge", map[string]any{"amount": json.Number("100")}},
		{"caf\u0065\u0301", map[string]any{"x": nil, "é": []any{json.Number("1.0"), "\u2028"}}},
		{"t\"ool\n", map[string]any{}},
	} {
		n, err := Normalize(tc.args)
		if err != nil {
			t.Fatal(err)
		}
		c, err := Canonical(n)
		if err != nil {
			t.Fatal(err)
		}
		want, err := Of(tc.tool, tc.args)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := OfNormalized(tc.tool, n.(map[string]any), c); err != nil || got != want {
			t.Errorf("OfNormalized(%q, %s) = %s, %v; Of = %s", tc.tool, c, got, err, want)
		}
	}
	if got, _ := OfNormalized("charge", map[string]any{"amount": json.Number("100")}, []byte(`{"amount":100}`)); got != "c136471529280eb4c70db92d5b8ff8d553408953a5794966a81ad3d42c83ec5d" {
		t.Errorf("the documented example: %s", got)
	}
	// Brackets and escaped quotes inside strings do not hide the depth.
	for _, name := range []string{"a", `q"`, `b\`, `"[{`} {
		deep := map[string]any{}
		for range MaxDepth - 2 {
			deep = map[string]any{"a": deep}
		}
		deep = map[string]any{name: deep}
		if _, err := Normalize(deep); err != nil {
			t.Fatalf("args %d levels deep refused on their own: %v", MaxDepth, err)
		}
		c, _ := Canonical(deep)
		_, want := Of("t", deep)
		if _, err := OfNormalized("t", deep, c); !errors.Is(want, ErrTooDeep) || err == nil || err.Error() != want.Error() {
			t.Errorf("args %d levels deep under %q: OfNormalized %v; Of %v", MaxDepth, name, err, want)
		}
	}
}

// TestIsIdent: isIdent is the regular expression ^[A-Za-z_][A-Za-z0-9_]*$
// that chooses between $.name and $["name"] in paths.
func TestIsIdent(t *testing.T) {
	re := regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	for _, name := range []string{"", "_", "a", "Z", "a1", "_9", "1a", "9", "a-b", "a b", "é", "aé", "A_z9", "a\n", "@", "[", "`", "{", "/", ":"} {
		if got, want := isIdent(name), re.MatchString(name); got != want {
			t.Errorf("isIdent(%q) = %v, want %v", name, got, want)
		}
	}
}
