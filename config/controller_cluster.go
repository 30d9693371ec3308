package config

import (
	"path/filepath"
	"time"
)

// ControllerCluster is the `cluster` section: the controller is a member of a cluster of
// controllers that replicate the store through raft. Absent, the controller is a single one.
type ControllerCluster struct {
	// ID names the member in the cluster, unique and the same across restarts; api.advertise
	// when not given.
	ID string `json:"id" yaml:"id"`
	// DataDir holds raft's log, stable state and snapshots; <dataDir>/raft when not given.
	DataDir string `json:"dataDir" yaml:"dataDir"`
	// Listen is the <host>:<port> raft listens on for the other members; Advertise the one
	// they dial, Listen when not given.
	Listen    string `json:"listen" yaml:"listen"`
	Advertise string `json:"advertise" yaml:"advertise"`
	// Raft's timing: a follower without news of a leader for HeartbeatTimeout starts an
	// election; a candidate waits up to ElectionTimeout; a leader without contact with a
	// quorum for LeaderLeaseTimeout steps down. ApplyTimeout bounds the wait for a write to
	// be appended to the log.
	HeartbeatTimeout   time.Duration `json:"heartbeatTimeout" yaml:"heartbeatTimeout"`
	ElectionTimeout    time.Duration `json:"electionTimeout" yaml:"electionTimeout"`
	LeaderLeaseTimeout time.Duration `json:"leaderLeaseTimeout" yaml:"leaderLeaseTimeout"`
	ApplyTimeout       time.Duration `json:"applyTimeout" yaml:"applyTimeout"`
	// A snapshot is taken, every SnapshotInterval, when SnapshotThreshold log entries were
	// appended since the last; TrailingLogs entries are kept after it for slow followers.
	SnapshotInterval  time.Duration `json:"snapshotInterval" yaml:"snapshotInterval"`
	SnapshotThreshold int           `json:"snapshotThreshold" yaml:"snapshotThreshold"`
	TrailingLogs      int           `json:"trailingLogs" yaml:"trailingLogs"`

	line int // of cluster.listen, for the checks against the other listeners
}

// Defaults and bounds of the cluster section; the defaults are hashicorp/raft's.
const (
	DefaultRaftHeartbeat         = time.Second
	DefaultRaftElection          = time.Second
	DefaultRaftLeaderLease       = 500 * time.Millisecond
	DefaultRaftApply             = 10 * time.Second
	DefaultRaftSnapshotInterval  = 2 * time.Minute
	DefaultRaftSnapshotThreshold = 8192
	DefaultRaftTrailingLogs      = 10240

	MinRaftTimeout    = 5 * time.Millisecond
	MaxRaftTimeout    = time.Minute
	MaxRaftApply      = 5 * time.Minute
	MaxRaftSnapshotIv = day
	MaxRaftLogCount   = 10_000_000
)

// cluster reads the `cluster` section; nil when the file has none.
func (r *reader) cluster(top *mapping, cfg *Controller, dir string) *ControllerCluster {
	if !top.has("cluster") {
		return nil
	}
	m := top.child("cluster")
	c := &ControllerCluster{}
	c.ID = m.str("id", cfg.API.Advertise)
	if c.ID == "" && m.get("id") != nil {
		r.errorf(m.lineOfKey("id"), "cluster.id", "must not be empty: the member's name in the cluster, unique and kept across restarts")
	}
	c.DataDir = m.filePath("dataDir", "", dir)
	if c.DataDir == "" && cfg.DataDir != "" {
		c.DataDir = filepath.Join(cfg.DataDir, "raft")
	}
	if m.require("listen", "the <host>:<port> raft listens on for the other members, e.g. 0.0.0.0:6363") {
		c.Listen = r.hostPort(m, "listen", "")
		c.line = m.lineOfKey("listen")
	}
	c.Advertise = r.hostPort(m, "advertise", "")
	if c.Advertise == "" && c.Listen != "" {
		if unspecifiedHost(c.Listen) {
			r.errorf(m.lineOfKey("advertise"), "cluster.advertise", "is required when cluster.listen (%s) listens on every address: the <host>:<port> the other members dial", c.Listen)
		} else {
			c.Advertise = c.Listen
		}
	}
	c.HeartbeatTimeout = m.duration("heartbeatTimeout", DefaultRaftHeartbeat, MinRaftTimeout, MaxRaftTimeout)
	c.ElectionTimeout = m.duration("electionTimeout", DefaultRaftElection, MinRaftTimeout, MaxRaftTimeout)
	c.LeaderLeaseTimeout = m.duration("leaderLeaseTimeout", DefaultRaftLeaderLease, MinRaftTimeout, MaxRaftTimeout)
	c.ApplyTimeout = m.duration("applyTimeout", DefaultRaftApply, time.Millisecond, MaxRaftApply)
	// raft refuses these orders; say so with the file's line.
	if c.ElectionTimeout < c.HeartbeatTimeout {
		r.errorf(m.lineOfKey("electionTimeout"), "cluster.electionTimeout", "%s is shorter than cluster.heartbeatTimeout (%s); allowed: heartbeatTimeout to %s",
			duration(c.ElectionTimeout), duration(c.HeartbeatTimeout), duration(MaxRaftTimeout))
	}
	if c.LeaderLeaseTimeout > c.HeartbeatTimeout {
		r.errorf(m.lineOfKey("leaderLeaseTimeout"), "cluster.leaderLeaseTimeout", "%s is longer than cluster.heartbeatTimeout (%s); allowed: %s to heartbeatTimeout",
			duration(c.LeaderLeaseTimeout), duration(c.HeartbeatTimeout), duration(MinRaftTimeout))
	}
	c.SnapshotInterval = m.duration("snapshotInterval", DefaultRaftSnapshotInterval, MinRaftTimeout, MaxRaftSnapshotIv)
	c.SnapshotThreshold = m.integer("snapshotThreshold", DefaultRaftSnapshotThreshold, 1, MaxRaftLogCount)
	c.TrailingLogs = m.integer("trailingLogs", DefaultRaftTrailingLogs, 1, MaxRaftLogCount)
	m.finish()
	return c
}
