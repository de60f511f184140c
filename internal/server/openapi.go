package server

import (
	"net/http"
	"strconv"

	"github.com/idemctl/idemctl/docs"
	"github.com/idemctl/idemctl/internal/logkey"
	"github.com/idemctl/idemctl/internal/wire"
)

// handleOpenAPI answers GET /v1/openapi.json with the embedded document
// (docs/openapi.yaml as JSON), for client generators; like the probes it
// needs no token. Unlike the API's answers it may be cached: it changes only with the
// binary.
func (s *Server) handleOpenAPI(w http.ResponseWriter, _ *http.Request) {
	body, err := docs.OpenAPIJSON()
	if err != nil { // the document is embedded and tested; a bug if it happens
		s.log.Error("openapi document", logkey.Err, err)
		writeError(w, s.log, http.StatusInternalServerError, wire.CodeInternal, "the OpenAPI document could not be read")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(body)
}
