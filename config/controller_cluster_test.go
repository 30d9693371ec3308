package config

import (
	"reflect"
	"testing"
	"time"
)

func TestControllerClusterDefaults(t *testing.T) {
	t.Parallel()
	cfg, errs := parseController(t, minimalController)
	if errs != nil {
		t.Fatal(errs)
	}
	if cfg.Cluster != nil {
		t.Fatalf("no cluster section gave %+v, want none", cfg.Cluster)
	}
	cfg, errs = parseController(t, withSnippet(t, minimalController, "api: {advertise: 'ctrl-a.example.com:1280'}\ncluster: {listen: '127.0.0.1:6363'}"))
	if errs != nil {
		t.Fatal(errs)
	}
	want := &ControllerCluster{
		ID: "ctrl-a.example.com:1280", DataDir: "/etc/zmesh/data/raft", Listen: "127.0.0.1:6363", Advertise: "127.0.0.1:6363",
		HeartbeatTimeout: time.Second, ElectionTimeout: time.Second, LeaderLeaseTimeout: 500 * time.Millisecond,
		ApplyTimeout: 10 * time.Second, SnapshotInterval: 2 * time.Minute, SnapshotThreshold: 8192, TrailingLogs: 10240,
	}
	got := *cfg.Cluster
	got.line = 0
	if !reflect.DeepEqual(&got, want) {
		t.Errorf("cluster = %+v\nwant      %+v", got, *want)
	}
	cfg, errs = parseController(t, withSnippet(t, minimalController, "cluster: {id: c2, dataDir: r2, listen: '127.0.0.1:6363', trailingLogs: 1}"))
	if errs != nil {
		t.Fatal(errs)
	}
	if c := cfg.Cluster; c.ID != "c2" || c.DataDir != "/etc/zmesh/r2" || c.TrailingLogs != 1 {
		t.Errorf("cluster = %+v, want id c2, dataDir /etc/zmesh/r2, trailingLogs 1", c)
	}
}

func TestControllerClusterBounds(t *testing.T) {
	t.Parallel()
	parse := func(doc string) (any, []string) {
		cfg, errs := parseController(t, withSnippet(t, minimalController, doc))
		if errs != nil {
			return nil, errs
		}
		return cfg, nil
	}
	base := "cluster: {listen: '127.0.0.1:6363', heartbeatTimeout: 1m, electionTimeout: 1m, "
	checkBound(t, durationBound(base+"leaderLeaseTimeout: %s}", "cluster.leaderLeaseTimeout", MinRaftTimeout, MaxRaftTimeout), parse)
	checkBound(t, durationBound("cluster: {listen: '127.0.0.1:6363', leaderLeaseTimeout: 5ms, electionTimeout: 1m, heartbeatTimeout: %s}", "cluster.heartbeatTimeout", MinRaftTimeout, MaxRaftTimeout), parse)
	checkBound(t, durationBound("cluster: {listen: '127.0.0.1:6363', applyTimeout: %s}", "cluster.applyTimeout", time.Millisecond, MaxRaftApply), parse)
	checkBound(t, durationBound("cluster: {listen: '127.0.0.1:6363', snapshotInterval: %s}", "cluster.snapshotInterval", MinRaftTimeout, MaxRaftSnapshotIv), parse)
}

func TestControllerClusterErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		doc  string
		want []string
	}{
		{"listen required", controllerWith("cluster:\n  id: a\n"), []string{
			"c.yml:6: cluster.listen: is required: the <host>:<port> raft listens on for the other members, e.g. 0.0.0.0:6363",
		}},
		{"advertise required", controllerWith("cluster:\n  listen: 0.0.0.0:6363\n"), []string{
			"c.yml:6: cluster.advertise: is required when cluster.listen (0.0.0.0:6363) listens on every address: the <host>:<port> the other members dial",
		}},
		{"timeouts out of order", controllerWith("cluster:\n  listen: 127.0.0.1:6363\n  heartbeatTimeout: 2s\n  electionTimeout: 1s\n  leaderLeaseTimeout: 3s\n"), []string{
			"c.yml:8: cluster.electionTimeout: 1s is shorter than cluster.heartbeatTimeout (2s); allowed: heartbeatTimeout to 1m",
			"c.yml:9: cluster.leaderLeaseTimeout: 3s is longer than cluster.heartbeatTimeout (2s); allowed: 5ms to heartbeatTimeout",
		}},
		{"counts", controllerWith("cluster:\n  listen: 127.0.0.1:6363\n  snapshotThreshold: 0\n  trailingLogs: many\n"), []string{
			"c.yml:7: cluster.snapshotThreshold: 0 is below the minimum 1",
			`c.yml:8: cluster.trailingLogs: "many" is not a whole number`,
		}},
		{"no trailing logs", controllerWith("cluster:\n  listen: 127.0.0.1:6363\n  trailingLogs: 0\n"), []string{
			"c.yml:7: cluster.trailingLogs: 0 is below the minimum 1",
		}},
		{"empty id", controllerWith("cluster:\n  id: ''\n  listen: 127.0.0.1:6363\n"), []string{
			"c.yml:6: cluster.id: must not be empty: the member's name in the cluster, unique and kept across restarts",
		}},
		{"port taken", controllerWith("cluster:\n  listen: 127.0.0.1:6262\n"), []string{
			"c.yml:6: cluster.listen: 127.0.0.1:6262 is already bound by ctrl.listen",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := ParseController("c.yml", []byte(tt.doc), testEnv)
			var got []string
			if err != nil {
				got = strs(err.(Errors))
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("errors:\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

func TestControllerClusterUnknownKey(t *testing.T) {
	t.Parallel()
	_, warns, err := ParseController("c.yml", []byte(controllerWith("cluster:\n  listen: 127.0.0.1:6363\n  trailingLog: 5\n")), testEnv)
	if err != nil {
		t.Fatal(err)
	}
	if len(warns) == 0 || warns[0].Path != "cluster.trailingLog" || warns[0].Line != 7 || !warns[0].UnknownKey {
		t.Errorf("warnings %v, want the first an unknown key cluster.trailingLog at line 7", warns)
	}
}
