package toolreg

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/idemctl/idemctl/internal/tool"
	"github.com/idemctl/idemctl/internal/tool/builtin"
)

// Validate checks a call's tool and (normalized) args at accept time. An
// unknown tool wraps tool.ErrUnknownTool; bad args wrap tool.ErrInvalidArgs
// with a message naming the failing place. Built-in tools are checked by
// builtin.Validate, exactly as without a registry; other tools by the chaos
// rules of tool.ValidateChaos, then by their schema, the "_" arguments
// left out (they are idemctl's, not the tool's).
func (r *Registry) Validate(name string, args map[string]any, chaos bool) error {
	t, ok := r.Lookup(name)
	if !ok {
		if r.Unavailable(name) {
			return fmt.Errorf("%w: %q", ErrUpstreamUnavailable, name)
		}
		return fmt.Errorf("%w %q (known tools: %s)", tool.ErrUnknownTool, name, strings.Join(r.Names(), ", "))
	}
	if t.Kind == KindBuiltin {
		return builtin.Validate(name, args, chaos)
	}
	if err := tool.ValidateChaos(name, args, chaos); err != nil {
		return err
	}
	clean := make(map[string]any, len(args))
	for k, v := range args {
		if !tool.IsChaosArg(k) {
			clean[k] = v
		}
	}
	err := t.schema.Validate(clean)
	if err == nil {
		return nil
	}
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return fmt.Errorf("%w: %s: %v", tool.ErrInvalidArgs, name, err)
	}
	path, msg := firstLeaf(verr)
	return fmt.Errorf("%w: %s: at %s: %s", tool.ErrInvalidArgs, name, path, msg)
}

// leaf is one of the schema validator's innermost errors: where, as a
// JSON Pointer into the validated document ("" for its root), and what.
type leaf struct{ path, msg string }

// leaves lists the validator's innermost errors, the ones that name a
// place; the others only group them.
func leaves(e *jsonschema.ValidationError) []leaf {
	if len(e.Causes) == 0 {
		var b strings.Builder
		for _, tok := range e.InstanceLocation {
			b.WriteByte('/')
			b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(tok))
		}
		return []leaf{{b.String(), e.ErrorKind.LocalizedString(printer)}}
	}
	var out []leaf
	for _, c := range e.Causes {
		out = append(out, leaves(c)...)
	}
	return out
}

// firstLeaf picks, of the validator's innermost errors, the one at the
// smallest instance path (then the smallest message), so the same bad args
// are always reported the same way. The path is a JSON Pointer into the
// request body ("/args/amount").
func firstLeaf(e *jsonschema.ValidationError) (path, msg string) {
	best := slices.MinFunc(leaves(e), func(a, b leaf) int {
		return cmp.Or(strings.Compare(a.path, b.path), strings.Compare(a.msg, b.msg))
	})
	return "/args" + best.path, best.msg
}

// leafMessages returns the smallest instance location among the
// validator's innermost errors (a JSON Pointer, "" for the root) and every
// message at it, sorted: the same bad document is always reported the same
// way.
func leafMessages(e *jsonschema.ValidationError) (path string, msgs []string) {
	all := leaves(e)
	path = slices.MinFunc(all, func(a, b leaf) int { return strings.Compare(a.path, b.path) }).path
	for _, l := range all {
		if l.path == path {
			msgs = append(msgs, l.msg)
		}
	}
	slices.Sort(msgs)
	return path, slices.Compact(msgs)
}

// compileSchema compiles a JSON Schema document (draft 2020-12 unless it
// says otherwise). It must be self-contained: a $ref to anything outside it
// is refused, so loading a tools file never reads another file or the
// network.
func compileSchema(name string, doc []byte) (*jsonschema.Schema, json.RawMessage, error) {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return nil, nil, fmt.Errorf("not JSON: %v", err)
	}
	switch v.(type) {
	case map[string]any, bool:
	default:
		return nil, nil, errors.New("must be an object (or a boolean)")
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	loc := "file:///idemctl/tools/" + name + ".schema.json"
	if err := c.AddResource(loc, v); err != nil {
		return nil, nil, err
	}
	sch, err := c.Compile(loc)
	if err != nil {
		// The metaschema's verdict is a tree of causes; one line naming
		// the place in the schema reads better in a start-up error.
		// (SchemaValidationError has no Unwrap: its Err is read by hand.)
		var serr *jsonschema.SchemaValidationError
		var verr *jsonschema.ValidationError
		if errors.As(err, &serr) && errors.As(serr.Err, &verr) {
			path, msgs := leafMessages(verr)
			if path == "" {
				path = "/"
			}
			return nil, nil, fmt.Errorf("not a valid JSON Schema: at %s: %s", path, strings.Join(msgs, "; "))
		}
		return nil, nil, errors.New(strings.ReplaceAll(err.Error(), loc, "schema"))
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, doc); err != nil {
		return nil, nil, err
	}
	return sch, buf.Bytes(), nil
}

type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("%s: schemas must be self-contained ($ref to other documents is not supported)", url)
}

// printer renders the schema validator's messages.
var printer = message.NewPrinter(language.English)
