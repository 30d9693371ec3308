package metrics

import (
	"testing"
)

// A cluster member's figures are gauges read at each scrape; a controller that is not a
// member (yet) exports none of them, and one without a cluster source neither.
func TestClusterGauges(t *testing.T) {
	t.Parallel()
	figures, member := Cluster{}, false
	m := New(Sources{
		Counts:           func() (map[string]int, error) { return nil, nil },
		StoreSizes:       func() (int64, int64) { return 0, 0 },
		ConnectedRouters: func() int { return 0 },
		Cluster:          func() (Cluster, bool) { return figures, member },
	})
	read := func() map[string]float64 {
		mfs, err := m.Gatherer().Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, mf := range mfs {
			if len(mf.GetName()) > 14 && mf.GetName()[:14] == "zmesh_cluster_" {
				out[mf.GetName()] = mf.Metric[0].GetGauge().GetValue()
			}
		}
		return out
	}
	if got := read(); len(got) != 0 {
		t.Fatalf("not a member: %v, want no cluster gauge", got)
	}
	figures, member = Cluster{Leader: true, Term: 4, CommitIndex: 120, AppliedIndex: 117, ApplyLag: 3, Members: 3}, true
	want := map[string]float64{"zmesh_cluster_leader": 1, "zmesh_cluster_term": 4, "zmesh_cluster_commit_index": 120,
		"zmesh_cluster_applied_index": 117, "zmesh_cluster_apply_lag": 3, "zmesh_cluster_members": 3}
	got := read()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("gauges %v, want %v", got, want)
	}
	figures.Leader = false
	if got := read(); got["zmesh_cluster_leader"] != 0 {
		t.Errorf("a follower's zmesh_cluster_leader = %v", got["zmesh_cluster_leader"])
	}
}
