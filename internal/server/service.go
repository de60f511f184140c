package server

import (
	"net/http"
	"runtime/debug"
	"time"
)

// ServiceView is the body of GET /v1: what a client may rely on from this
// server (docs/api.md, "Service information").
type ServiceView struct {
	Version string `json:"version"`
	// Auth is true when requests need a bearer token.
	Auth bool `json:"auth"`
	// RetentionSeconds is how long a final call is kept after its last
	// update; 0 means forever. After it, the key is unknown again.
	RetentionSeconds int64 `json:"retention_seconds"`
	// TombstoneRetentionSeconds is how long a purged call's key answers
	// 410 idempotency_key_expired before it is new again; 0 means never
	// (no tombstones: a purged key is new at once).
	TombstoneRetentionSeconds int64 `json:"tombstone_retention_seconds"`
	Limits                    struct {
		MaxBodyBytes        int   `json:"max_body_bytes"`
		MaxKeyLength        int   `json:"max_key_length"`
		MaxClientIDLength   int   `json:"max_client_id_length"`
		MaxWaitSeconds      int64 `json:"max_wait_seconds"`
		MaxConcurrentBodies int   `json:"max_concurrent_bodies"`
		MaxHeldWaits        int   `json:"max_held_waits"`
		MaxResultBytes      int   `json:"max_result_bytes"`
		// MaxPending is the queue bound for new keys (--max-pending);
		// 0 means unlimited.
		MaxPending int64 `json:"max_pending"`
	} `json:"limits"`
}

// handleService is GET /v1: version, auth, retention and limits. It needs
// a token when auth is on, like every path but the probes.
func (s *Server) handleService(w http.ResponseWriter, _ *http.Request) {
	v := ServiceView{Version: s.serviceVersion(), Auth: s.cfg.Auth != nil,
		RetentionSeconds:          int64(s.cfg.Retention / time.Second),
		TombstoneRetentionSeconds: int64(s.cfg.TombstoneRetention / time.Second)}
	v.Limits.MaxBodyBytes = MaxBodyBytes
	v.Limits.MaxKeyLength = MaxKeyLength
	v.Limits.MaxClientIDLength = MaxClientIDLength
	v.Limits.MaxWaitSeconds = int64(s.cfg.MaxWait / time.Second)
	v.Limits.MaxConcurrentBodies = s.cfg.MaxConcurrentBodies
	v.Limits.MaxHeldWaits = s.cfg.MaxHeldWaits
	v.Limits.MaxResultBytes = s.cfg.MaxResultBytes
	v.Limits.MaxPending = s.maxPending
	writeJSON(w, s.log, http.StatusOK, v)
}

// serviceVersion is Config.Version, or the build's when it is empty.
func (s *Server) serviceVersion() string {
	if s.cfg.Version != "" {
		return s.cfg.Version
	}
	return buildVersion()
}

// buildVersion is the main module's version from the build information,
// "(devel)" for a build from a work tree.
func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}
