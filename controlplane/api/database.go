package api

import (
	"net/http"
	"time"
)

// registerDatabase adds the administrators' backup of the controller's store.
func (s *Server) registerDatabase() {
	s.handle(management, "GET", "/database/backup", adminOnly,
		"Stream a consistent backup of the controller's store (zmesh controller backup)", s.backupStore)
}

// backupStore streams the backup while the controller serves. Once the first byte is sent
// an error can no longer become an error answer: the stream then ends without its checksum,
// and the client refuses it.
func (s *Server) backupStore(c *call) error {
	if s.info.Backup == nil {
		return newErr(codeNotFound, "this controller has no store to back up")
	}
	c.w.Header().Set("Content-Type", "application/octet-stream")
	c.w.Header().Set("Content-Disposition", `attachment; filename="zmesh-store.backup"`)
	// A large store takes longer than the server's write timeout: each write gets its own,
	// so a client that stops reading does not hold the store's snapshot for long.
	cw := &countingWriter{w: c.w, rc: http.NewResponseController(c.w)}
	start := time.Now()
	if err := s.info.Backup(cw); err != nil {
		if cw.n == 0 { // nothing sent yet: the client gets the error itself
			return err
		}
		s.log.Error("store backup failed", "requestId", c.requestID, "identity", c.identity.Name, "bytes", cw.n, "err", err)
		return nil
	}
	s.log.Info("store backup sent", "requestId", c.requestID, "identity", c.identity.Name, "bytes", cw.n, "duration", time.Since(start))
	return nil
}

// backupWriteTimeout bounds each write of a backup stream to its client.
const backupWriteTimeout = 30 * time.Second

type countingWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
	n  int64
}

func (cw *countingWriter) Write(p []byte) (int, error) {
	_ = cw.rc.SetWriteDeadline(time.Now().Add(backupWriteTimeout))
	n, err := cw.w.Write(p)
	cw.n += int64(n)
	return n, err
}
