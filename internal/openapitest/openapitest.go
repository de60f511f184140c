// Package openapitest checks HTTP answers against docs/openapi.yaml, so the
// API's description cannot drift from the code: the API tests send their
// requests through Transport, and every response they receive is validated
// (status, headers, body) by a maintained OpenAPI 3.1 validator.
package openapitest

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	liberrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/helpers"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	"github.com/pb33f/libopenapi/datamodel/high/base"

	"github.com/idemctl/idemctl/docs"
)

// checker is the parsed document: the validator, and the error body's
// schema for answers on routes the document cannot list (an unknown path's
// 404, a 405 on a method of no operation).
type checker struct {
	v        validator.Validator
	errorDoc *base.Schema
}

// load parses the document once per test binary: that costs tens of
// milliseconds, and the validator is safe for concurrent use.
var load = sync.OnceValues(func() (*checker, error) {
	doc, err := libopenapi.NewDocument(docs.OpenAPIYAML)
	if err != nil {
		return nil, fmt.Errorf("docs/openapi.yaml: %w", err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		return nil, fmt.Errorf("docs/openapi.yaml: %v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		return nil, fmt.Errorf("docs/openapi.yaml is not a valid OpenAPI document: %s", join(verrs))
	}
	model, err := doc.BuildV3Model()
	if err != nil {
		return nil, fmt.Errorf("docs/openapi.yaml: %w", err)
	}
	proxy := model.Model.Components.Schemas.GetOrZero("ErrorResponse")
	if proxy == nil {
		return nil, fmt.Errorf("docs/openapi.yaml: no components.schemas.ErrorResponse")
	}
	return &checker{v: v, errorDoc: proxy.Schema()}, nil
})

// Validate reports whether docs/openapi.yaml parses and is a valid OpenAPI
// document.
func Validate() error {
	_, err := load()
	return err
}

// Described reports whether the document speaks for path: the API's
// routes. The MCP door (JSON-RPC, its own protocol), the web console and
// the profiler are not part of the HTTP API the document describes.
func Described(path string) bool {
	for _, p := range []string{"/mcp", "/ui", "/console", "/debug"} {
		if path == p || strings.HasPrefix(path, p+"/") {
			return false
		}
	}
	return true
}

// Check validates one answer to req. It reads resp.Body and puts an
// identical reader back, so the caller can still read it. HEAD answers and
// paths the document does not describe pass unchecked. An answer on a path
// or method the document has no operation for must be a 404 or 405 in the
// error shape: the document cannot list every path that does not exist.
func Check(req *http.Request, resp *http.Response) error {
	if req.Method == http.MethodHead || !Described(req.URL.Path) {
		return nil
	}
	c, err := load()
	if err != nil {
		return err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return fmt.Errorf("reading the answer to %s %s: %w", req.Method, req.URL.Path, err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	check := *resp
	check.Body = io.NopCloser(bytes.NewReader(body))
	ok, verrs := c.v.ValidateHttpResponse(asDescribed(req), &check)
	if !ok && noOperation(verrs) {
		switch resp.StatusCode {
		case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusUnauthorized: // 401: auth answers before routing
		default:
			return fmt.Errorf("%s %s answered %d, but docs/openapi.yaml has no such operation", req.Method, req.URL.Path, resp.StatusCode)
		}
		ok, verrs = schema_validation.NewSchemaValidator().ValidateSchemaBytes(c.errorDoc, body)
	}
	if !ok {
		return fmt.Errorf("%s %s answered %d, which docs/openapi.yaml does not describe: %s\nbody: %.400s",
			req.Method, req.URL.Path, resp.StatusCode, join(verrs), body)
	}
	return nil
}

// byKeyPrefix is the one route whose last parameter may contain '/' (a key
// is everything after it, docs/api.md), which an OpenAPI path template
// cannot say; the key is escaped into one segment for matching.
const byKeyPrefix = "/v1/tool-calls/by-key/"

func asDescribed(req *http.Request) *http.Request {
	key, ok := strings.CutPrefix(req.URL.Path, byKeyPrefix)
	if !ok || !strings.Contains(key, "/") {
		return req
	}
	r := req.Clone(req.Context())
	r.URL.Path = byKeyPrefix + url.PathEscape(key)
	r.URL.RawPath = ""
	return r
}

// noOperation reports whether the validator found no operation for the
// request (as opposed to an answer that does not match one).
func noOperation(errs []*liberrors.ValidationError) bool {
	for _, e := range errs {
		if e.ValidationType != helpers.PathValidation {
			return false
		}
	}
	return len(errs) > 0
}

// Transport wraps base (http.DefaultTransport if nil) so that every answer
// is checked; a mismatch fails t (the request itself still returns).
func Transport(t testing.TB, base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return roundTripper{t: t, base: base}
}

type roundTripper struct {
	t    testing.TB
	base http.RoundTripper
}

func (rt roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := rt.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	if cerr := Check(req, resp); cerr != nil {
		rt.t.Errorf("openapi: %v", cerr)
	}
	return resp, nil
}

func join[E error](errs []E) string {
	var b strings.Builder
	for i, e := range errs {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(e.Error())
	}
	return b.String()
}
