package metrics

import "github.com/prometheus/client_golang/prometheus"

// Cluster is a cluster member's raft figures at one moment.
type Cluster struct {
	Leader bool
	// ApplyLag is the count of entries committed and not yet applied by this member.
	Term, CommitIndex, AppliedIndex, ApplyLag uint64
	Members                                   int
}

// clusterCollector reads the raft node's figures when Prometheus scrapes.
type clusterCollector struct {
	read                                             func() (Cluster, bool)
	leader, term, commit, applied, applyLag, members *prometheus.Desc
}

func newClusterCollector(read func() (Cluster, bool)) *clusterCollector {
	d := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return &clusterCollector{
		read:     read,
		leader:   d("zmesh_cluster_leader", "1 when this controller leads its cluster, 0 otherwise."),
		term:     d("zmesh_cluster_term", "The raft term this member is in."),
		commit:   d("zmesh_cluster_commit_index", "The index of the last log entry this member knows committed."),
		applied:  d("zmesh_cluster_applied_index", "The index of the last log entry this member applied to its store."),
		applyLag: d("zmesh_cluster_apply_lag", "Log entries committed and not yet applied by this member."),
		members:  d("zmesh_cluster_members", "Members of the cluster's configuration, as this member knows it."),
	}
}

func (c *clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.leader, c.term, c.commit, c.applied, c.applyLag, c.members} {
		ch <- d
	}
}

func (c *clusterCollector) Collect(ch chan<- prometheus.Metric) {
	f, ok := c.read()
	if !ok {
		return
	}
	leader := 0.0
	if f.Leader {
		leader = 1
	}
	for _, m := range []struct {
		d *prometheus.Desc
		v float64
	}{{c.leader, leader}, {c.term, float64(f.Term)}, {c.commit, float64(f.CommitIndex)}, {c.applied, float64(f.AppliedIndex)},
		{c.applyLag, float64(f.ApplyLag)}, {c.members, float64(f.Members)}} {
		ch <- prometheus.MustNewConstMetric(m.d, prometheus.GaugeValue, m.v)
	}
}
