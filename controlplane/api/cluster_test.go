package api

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/zmesh/zmesh/controlplane/cluster"
)

// A write refused by a cluster member answers 503 with a code naming the cause, the message
// of the refusal and Retry-After; the same error wrapped by a caller is recognised.
func TestClusterRefusals(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tt := range []struct {
		err  error
		code string
	}{
		{&cluster.NotLeaderError{Member: "b", LeaderID: "a", LeaderAddress: "10.0.0.1:6363"}, "CLUSTER_NOT_LEADER"},
		{&cluster.NotLeaderError{Member: "b"}, "CLUSTER_HAS_NO_LEADER"},
		{fmt.Errorf("create identity: %w", &cluster.NotLeaderError{Member: "b"}), "CLUSTER_HAS_NO_LEADER"},
		{fmt.Errorf("cluster: controller b has left the cluster: %w", raft.ErrRaftShutdown), "CLUSTER_UNAVAILABLE"},
		{fmt.Errorf("lost the leadership: %w", raft.ErrLeadershipLost), "CLUSTER_UNAVAILABLE"},
	} {
		rec := httptest.NewRecorder()
		writeError(rec, log, "r1", tt.err)
		var body struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatal(err)
		}
		if rec.Code != http.StatusServiceUnavailable || body.Error.Code != tt.code || body.Error.Message != tt.err.Error() || rec.Header().Get("Retry-After") != "1" {
			t.Errorf("%v: %d %+v Retry-After %q, want 503 %s with the error's text", tt.err, rec.Code, body.Error, rec.Header().Get("Retry-After"), tt.code)
		}
	}
}
