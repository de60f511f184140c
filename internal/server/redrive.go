package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/idemctl/idemctl/internal/callview"
	"github.com/idemctl/idemctl/internal/logkey"
	"github.com/idemctl/idemctl/internal/redrive"
	"github.com/idemctl/idemctl/internal/wire"
)

// maxRedriveBody bounds POST /v1/redrive's body: a handful of short fields.
const maxRedriveBody = 4 << 10

// maxRedriveField bounds the tool and code a redrive names (as a key).
const maxRedriveField = MaxKeyLength

// handleRedrive is POST /v1/redrive (docs/api.md, "Redrive"): the
// principal's failed calls the body selects go back to pending, each
// through the same reset as a same-key retry, audited redriven with the
// principal. A bad body changes nothing (400).
func (s *Server) handleRedrive(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRedriveBody))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeError(w, s.log, http.StatusRequestEntityTooLarge, wire.CodePayloadTooLarge,
				fmt.Sprintf("body exceeds %d bytes", maxRedriveBody))
			return
		}
		s.bodyReadError(w, r, err)
		return
	}
	var req wire.Redrive
	if len(bytes.TrimSpace(body)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil || dec.More() {
			writeError(w, s.log, http.StatusBadRequest, wire.CodeBadRequest,
				"body must be one JSON object with tool, code, since, until, limit, force, dry_run")
			return
		}
	}
	if len(req.Tool) > maxRedriveField || len(req.Code) > maxRedriveField {
		writeError(w, s.log, http.StatusBadRequest, wire.CodeBadRequest,
			fmt.Sprintf("tool and code are at most %d bytes", maxRedriveField))
		return
	}
	principal := principalOf(r.Context())
	f := redrive.Filter{Principal: &principal, Tool: req.Tool, Code: req.Code, Since: req.Since, Until: req.Until,
		Limit: req.Limit, Force: req.Force, DryRun: req.DryRun}
	if err := f.Check(); err != nil {
		writeError(w, s.log, http.StatusBadRequest, wire.CodeBadRequest, err.Error())
		return
	}
	res, err := redrive.Run(r.Context(), s.st, f, principal)
	if err != nil && len(res.Calls) == 0 {
		s.storeError(w, r, err)
		return
	}
	if err != nil {
		// Some calls were redriven before the store failed: say which,
		// with more set, so a client runs it again.
		s.log.Warn("redrive stopped early", logkey.Err, err, "redriven", len(res.Calls))
		res.More = true
	}
	out := wire.Redriven[wire.Call]{DryRun: req.DryRun, Calls: make([]wire.Call, 0, len(res.Calls)), More: res.More}
	for _, c := range res.Calls {
		out.Calls = append(out.Calls, callview.Of(c))
	}
	if !req.DryRun && len(res.Calls) > 0 {
		for range res.Calls {
			s.exec.Added()
		}
		s.exec.Wake()
		s.log.Info("redrive", logkey.Principal, principal, logkey.Tool, req.Tool, "code", req.Code,
			"redriven", len(res.Calls), "force", req.Force)
	}
	writeJSON(w, s.log, http.StatusOK, out)
}
