package toolreg

import (
	"maps"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// The tools file is decoded into the typed shapes of file.go with the
// helpers below rather than by yaml.v3's struct decoding alone, because a
// refusal must name the tool and the field and say what the file wrote
// ("effect: must be true or false, got \"yes\""), and every bad entry is
// reported, not only the first: so decoding itself never fails on a wrong
// value, it keeps the value for parseTool's checks, which run in one fixed
// order whatever the order of the keys in the file. The shapes' yaml tags
// are the one list of the fields a tools file may have.

// opt is one optional value of the tools file, meant to be a T.
type opt[T any] struct {
	set bool // the key is present, with any value (null included)
	ok  bool // the value is a T
	val T    // the value, when ok
	raw any  // the value as YAML decodes it generically, for messages
}

// UnmarshalYAML keeps the value whatever it is. yaml.v3 does not call it
// for a null value; mapping.decode marks such keys set.
func (o *opt[T]) UnmarshalYAML(n *yaml.Node) error {
	if err := n.Decode(&o.raw); err != nil {
		return err
	}
	o.set = true
	o.val, o.ok = o.raw.(T)
	return nil
}

func (o *opt[T]) markSet() { o.set = true }

// mapping is the state every mapping shape of the file keeps about itself.
type mapping struct {
	set bool // the key that holds the mapping is present
	// ok: the value is a mapping with string keys; anything else (a list,
	// a scalar, null, a mapping keyed by numbers) is refused as "must be a
	// mapping", as YAML decodes it to something other than map[string]any.
	ok   bool
	keys []string // its keys, sorted: the unknown-field check goes in this order
}

func (m *mapping) markSet() { m.set = true }

// decode decodes n into dst, a pointer to a struct of opt and mapping
// shapes, and records what mapping keeps. A wrong value is not an error;
// an error is only a document YAML itself cannot decode, which Parse has
// refused before.
func (m *mapping) decode(n *yaml.Node, dst any) error {
	m.set = true
	var raw any
	if err := n.Decode(&raw); err != nil {
		return err
	}
	values, ok := raw.(map[string]any)
	if !ok {
		return nil
	}
	m.ok, m.keys = true, slices.Sorted(maps.Keys(values))
	if err := n.Decode(dst); err != nil {
		return err
	}
	// A key present with a null value ("timeout: ~") is refused as its
	// value, as it always was, not taken for an absent key.
	v := reflect.ValueOf(dst).Elem()
	for i := range v.NumField() {
		name := yamlName(v.Type().Field(i))
		if name == "" {
			continue // the shape's own state, not a key: an empty key ("": ~) must not reach it
		}
		if val, present := values[name]; present && val == nil {
			if s, ok := v.Field(i).Addr().Interface().(interface{ markSet() }); ok {
				s.markSet()
			}
		}
	}
	return nil
}

// unknown returns the first of m's keys, in sorted order, that is not one
// of allowed.
func (m *mapping) unknown(allowed []string) (string, bool) {
	for _, k := range m.keys {
		if !slices.Contains(allowed, k) {
			return k, true
		}
	}
	return "", false
}

// fieldNames lists the yaml names of shape's fields (a struct value) in
// their order: the untagged ones, and those whose kind tag (a
// comma-separated list of kinds) names kind.
func fieldNames(shape any, kind string) []string {
	t := reflect.TypeOf(shape)
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		name := yamlName(f)
		tag, tagged := f.Tag.Lookup("kind")
		if name == "" || (tagged && !slices.Contains(strings.Split(tag, ","), kind)) {
			continue
		}
		names = append(names, name)
	}
	return names
}

// yamlName is the key of a tagged field, "" for an untagged one.
func yamlName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	return name
}
