package fingerprint

import "encoding/json"

// parsePlain is ParseJSON for the common document, several times cheaper
// than encoding/json's tokens (which allocate an error value at the end of
// every number and string they decode): it accepts only documents that are
// valid UTF-8 (checked by the caller), within every bound, and whose
// strings hold no escape, and returns what parseTokens returns for them.
// Anything else — an escape, a syntax error, a duplicate member, a bound
// reached — is ok false, and parseTokens decides, with its words for any
// refusal. FuzzCanonical holds the two to the same values.
func parsePlain(data []byte) (any, bool) {
	p := plainParser{data: data}
	v, ok := p.value(0)
	if !ok {
		return nil, false
	}
	p.space()
	return v, p.i == len(p.data)
}

type plainParser struct {
	data   []byte
	i      int
	values int // for MaxValues
}

// space skips JSON whitespace.
func (p *plainParser) space() {
	for p.i < len(p.data) {
		switch p.data[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// next is the byte after any whitespace (0 at the end).
func (p *plainParser) next() byte {
	p.space()
	if p.i < len(p.data) {
		return p.data[p.i]
	}
	return 0
}

func (p *plainParser) value(depth int) (any, bool) {
	c := p.next()
	if p.values++; p.values > MaxValues {
		return nil, false
	}
	switch {
	case c == '{':
		if depth >= MaxDepth {
			return nil, false
		}
		p.i++
		obj := map[string]any{}
		if p.next() == '}' {
			p.i++
			return obj, true
		}
		for {
			if p.next() != '"' {
				return nil, false
			}
			name, ok := p.string()
			if !ok {
				return nil, false
			}
			if _, dup := obj[name]; dup {
				return nil, false
			}
			if p.next() != ':' {
				return nil, false
			}
			p.i++
			v, ok := p.value(depth + 1)
			if !ok {
				return nil, false
			}
			obj[name] = v
			switch p.next() {
			case ',':
				p.i++
			case '}':
				p.i++
				return obj, true
			default:
				return nil, false
			}
		}
	case c == '[':
		if depth >= MaxDepth {
			return nil, false
		}
		p.i++
		arr := []any{}
		if p.next() == ']' {
			p.i++
			return arr, true
		}
		for {
			v, ok := p.value(depth + 1)
			if !ok {
				return nil, false
			}
			arr = append(arr, v)
			switch p.next() {
			case ',':
				p.i++
			case ']':
				p.i++
				return arr, true
			default:
				return nil, false
			}
		}
	case c == '"':
		return p.string()
	case c == '-' || c >= '0' && c <= '9':
		start := p.i
		for p.i < len(p.data) {
			c := p.data[p.i]
			if c != '-' && c != '+' && c != '.' && c != 'e' && c != 'E' && (c < '0' || c > '9') {
				break
			}
			p.i++
		}
		lit := string(p.data[start:p.i])
		if len(lit) > MaxNumberLength || !isJSONNumber(lit) {
			return nil, false
		}
		return json.Number(lit), true
	}
	for _, lit := range [...]struct {
		word string
		v    any
	}{{"true", true}, {"false", false}, {"null", nil}} {
		if len(p.data)-p.i >= len(lit.word) && string(p.data[p.i:p.i+len(lit.word)]) == lit.word {
			p.i += len(lit.word)
			return lit.v, true
		}
	}
	return nil, false
}

// string reads a string without escapes or control characters, at the
// opening quote.
func (p *plainParser) string() (string, bool) {
	p.i++
	start := p.i
	for ; p.i < len(p.data); p.i++ {
		switch c := p.data[p.i]; {
		case c == '"':
			s := string(p.data[start:p.i])
			p.i++
			return s, true
		case c == '\\' || c < 0x20:
			return "", false
		}
	}
	return "", false
}
