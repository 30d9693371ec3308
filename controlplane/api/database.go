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
	// A large store takes longer than the server's write timeout.
	_ = http.NewResponseController(c.w).SetWriteDeadline(time.Time{})
	c.w.Header().Set("Content-Type", "application/octet-stream")
	c.w.Header().Set("Content-Disposition", `attachment; filename="zmesh-store.backup"`)
	cw := &countingWriter{w: c.w}
	start := time.Now()
	if err := s.info.Backup(cw); err != nil {
		s.log.Error("store backup failed", "requestId", c.requestID, "identity", c.identity.Name, "bytes", cw.n, "err", err)
		return nil
	}
	s.log.Info("store backup sent", "requestId", c.requestID, "identity", c.identity.Name, "bytes", cw.n, "duration", time.Since(start))
	return nil
}

type countingWriter struct {
	w interface{ Write([]byte) (int, error) }
	n int64
}

func (cw *countingWriter) Write(p []byte) (int, error) {
	n, err := cw.w.Write(p)
	cw.n += int64(n)
	return n, err
}
