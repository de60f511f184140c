// Package docs carries the HTTP API's OpenAPI description (openapi.yaml,
// beside the prose reference) into the binary, so the server serves the very
// document its tests validate every response against.
package docs

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"sync"

	"go.yaml.in/yaml/v3"
)

// OpenAPIYAML is docs/openapi.yaml as written.
//
//go:embed openapi.yaml
var OpenAPIYAML []byte

var openAPIJSON = sync.OnceValues(func() ([]byte, error) {
	var doc any
	if err := yaml.Unmarshal(OpenAPIYAML, &doc); err != nil {
		return nil, fmt.Errorf("docs/openapi.yaml: %w", err)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("docs/openapi.yaml as JSON: %w", err)
	}
	return b, nil
})

// OpenAPIJSON is the same document as JSON (GET /v1/openapi.json), converted
// once. YAML is what people edit; JSON is what most generators fetch.
func OpenAPIJSON() ([]byte, error) { return openAPIJSON() }
