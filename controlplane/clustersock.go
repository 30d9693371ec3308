package controlplane

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/zmesh/zmesh/controlplane/cluster"
)

// The cluster commands reach the running controller through a Unix socket in its data
// directory: whoever may read the data directory (its owner: it is 0700) may run them. The
// management API would need an administrator's session, which a controller that is not yet
// a member cannot open (an API session is a write of the replicated store), and init is what
// creates the administrator.
const clusterSocket = "cluster.sock"

// ClusterSocket is the path of the cluster commands' socket of the data directory dataDir.
func ClusterSocket(dataDir string) string { return filepath.Join(dataDir, clusterSocket) }

// ClusterRequest is a cluster command: Op is init, add, remove, list or transfer-leadership;
// Arg the new member's API address (add) or a member's id (remove, transfer-leadership).
type ClusterRequest struct {
	Op  string `json:"op"`
	Arg string `json:"arg,omitempty"`
}

// ClusterReply is the answer: the members after the command, or the error's text.
type ClusterReply struct {
	Members []MemberStatus `json:"members,omitempty"`
	Error   string         `json:"error,omitempty"`
}

// serveClusterSocket serves the cluster commands until ctx ends.
func (c *Controller) serveClusterSocket(ctx context.Context) (func(), error) {
	path := ClusterSocket(c.cfg.DataDir)
	// A socket left by a controller that did not stop cleanly: the data directory's lock
	// says no other controller uses it.
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove the stale %s: %w", path, err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen for the cluster commands on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(c.clusterCommand), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() { srv.Serve(ln); close(done) }()
	return func() {
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
		<-done
		os.Remove(path)
	}, nil
}

func (c *Controller) clusterCommand(w http.ResponseWriter, r *http.Request) {
	var req ClusterRequest
	reply := func(status int, rep ClusterReply) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(rep)
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&req); err != nil {
		reply(http.StatusBadRequest, ClusterReply{Error: "a cluster command is a JSON {op, arg}: " + err.Error()})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), time.Minute)
	defer cancel()
	var err error
	switch req.Op {
	case "init":
		err = c.ClusterInit(ctx)
	case "add":
		_, err = c.ClusterAdd(ctx, req.Arg)
	case "remove":
		err = c.ClusterRemove(ctx, req.Arg)
	case "transfer-leadership":
		err = c.ClusterTransfer(ctx, req.Arg)
	case "list":
	default:
		err = fmt.Errorf("unknown cluster command %q; allowed: init, add, remove, list, transfer-leadership", req.Op)
	}
	if err != nil {
		msg := err.Error()
		// The command line talks to the controller of the data directory it was given.
		var nl *cluster.NotLeaderError
		if errors.As(err, &nl) && nl.LeaderID != "" {
			msg += "; run the command on " + nl.LeaderID + "'s host, with its configuration file"
		}
		reply(http.StatusConflict, ClusterReply{Error: msg})
		return
	}
	ms, err := c.ClusterMembers()
	if err != nil {
		reply(http.StatusConflict, ClusterReply{Error: err.Error()})
		return
	}
	reply(http.StatusOK, ClusterReply{Members: ms})
}

// RunClusterCommand sends req to the controller running on dataDir and returns the members
// after it.
func RunClusterCommand(ctx context.Context, dataDir string, req ClusterRequest) ([]MemberStatus, error) {
	path := ClusterSocket(dataDir)
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}}
	defer client.CloseIdleConnections()
	body, _ := json.Marshal(req)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://controller/cluster", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(hr)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("reach the controller at %s: %w (is it running with a cluster section, and may this user read its data directory?)", path, err)
		}
		return nil, fmt.Errorf("reach the controller at %s: %w", path, err)
	}
	defer resp.Body.Close()
	var rep ClusterReply
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&rep); err != nil {
		return nil, fmt.Errorf("the controller at %s answered %s: %w", path, resp.Status, err)
	}
	if rep.Error != "" {
		return nil, errors.New(rep.Error)
	}
	return rep.Members, nil
}
