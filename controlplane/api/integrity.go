package api

import (
	"net/http"
	"sync"
	"time"

	"github.com/zmesh/zmesh/controlplane/model"
)

// integrityRuns holds the state of the store's data integrity scans: one at a time, and the
// outcome of the last.
type integrityRuns struct {
	run sync.Mutex // held while a scan runs

	mu         sync.Mutex // guards the fields below
	inProgress bool
	fixing     bool
	start, end time.Time
	errText    string
	results    []model.IntegrityIssue
	tooMany    bool // the scan found more issues than results holds
}

// registerIntegrity adds the store's snapshot and data integrity scans.
func (s *Server) registerIntegrity() {
	runs := &integrityRuns{}
	s.handle(management, "POST", "/database/snapshot", adminOnly,
		"Writes a backup of the controller's store into its data directory", s.snapshotStore)
	s.handle(management, "POST", "/database/check-data-integrity", adminOnly,
		"Scans the store: file checksums, and records naming records that do not exist", func(c *call) error { return s.scanIntegrity(c, runs, false) })
	s.handle(management, "POST", "/database/fix-data-integrity", adminOnly,
		"Scans the store and deletes what belongs to records that do not exist", func(c *call) error { return s.scanIntegrity(c, runs, true) })
	s.handle(management, "GET", "/database/data-integrity-results", adminOnly,
		"Returns the state and findings of the last data integrity scan", func(c *call) error { return c.data(http.StatusOK, runs.view()) })
}

func (s *Server) snapshotStore(c *call) error {
	if s.info.Snapshot == nil {
		return newErr(codeNotFound, "this controller has no store to snapshot")
	}
	path, err := s.info.Snapshot()
	if err != nil {
		return err
	}
	s.log.Info("store snapshot written", "requestId", c.requestID, "identity", c.identity.Name, "path", path)
	return c.empty()
}

// scanIntegrity runs a scan to its end and answers 202 as the reference does (the results
// are then read from data-integrity-results); a scan already running answers 429.
func (s *Server) scanIntegrity(c *call, runs *integrityRuns, fix bool) error {
	if !runs.run.TryLock() {
		return newErr(model.CodeRateLimited, "a data integrity scan is running; read its outcome at %s/database/data-integrity-results", ManagementBase)
	}
	defer runs.run.Unlock()
	runs.mu.Lock()
	runs.inProgress, runs.fixing, runs.start, runs.end, runs.errText, runs.results, runs.tooMany = true, fix, time.Now().UTC(), time.Time{}, "", nil, false
	runs.mu.Unlock()

	var results []model.IntegrityIssue
	var errText string
	if s.info.Verify != nil {
		if err := s.info.Verify(); err != nil {
			results = append(results, model.IntegrityIssue{Description: "store files: " + err.Error()})
		}
	}
	found, more, err := s.m.CheckIntegrity(fix)
	if err != nil {
		errText = err.Error()
	}
	results = append(results, found...)
	s.log.Info("data integrity scan", "requestId", c.requestID, "identity", c.identity.Name, "fix", fix, "issues", len(results), "err", errText)

	runs.mu.Lock()
	runs.inProgress, runs.end, runs.errText, runs.results, runs.tooMany = false, time.Now().UTC(), errText, results, more
	runs.mu.Unlock()
	return c.data(http.StatusAccepted, struct{}{})
}

// view is the reference's dataIntegrityCheckDetails; times are null before the first scan.
func (r *integrityRuns) view() map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	results := make([]any, 0, len(r.results))
	for _, is := range r.results {
		results = append(results, map[string]any{"description": is.Description, "fixed": is.Fixed})
	}
	var errText any
	if r.errText != "" {
		errText = r.errText
	}
	return map[string]any{
		"inProgress": r.inProgress, "fixingErrors": r.fixing, "tooManyErrors": r.tooMany,
		"startTime": timeOrNil(r.start), "endTime": timeOrNil(r.end), "error": errText, "results": results,
	}
}
