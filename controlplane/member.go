package controlplane

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"time"

	"github.com/zmesh/zmesh/controlplane/api"
	"github.com/zmesh/zmesh/controlplane/cluster"
	"github.com/zmesh/zmesh/controlplane/metrics"
	"github.com/zmesh/zmesh/controlplane/store"
	"github.com/zmesh/zmesh/internal/certid"
	"github.com/zmesh/zmesh/internal/ctrlproto"
)

// ControllerRecord is a member of the cluster as every member knows it: a replicated record
// of the `controllers` collection, written by the leader when the member is bootstrapped or
// added, so that every member lists every other's addresses and certificate.
type ControllerRecord struct {
	ID string `json:"id"`
	// RaftAddress is where the other members reach its raft node.
	RaftAddress string `json:"raftAddress"`
	// APIAddress is its api.advertise; CtrlAddress the control channel endpoint routers use.
	APIAddress  string `json:"apiAddress"`
	CtrlAddress string `json:"ctrlAddress"`
	// CertPEM is its API server certificate.
	CertPEM  string    `json:"certPem"`
	JoinedAt time.Time `json:"joinedAt"`
}

// newControllers is the collection of the members' records.
func newControllers() *store.Collection[ControllerRecord] {
	return store.NewCollection("controllers", func(r *ControllerRecord) string { return r.ID })
}

// selfPath serves a member's own record, to a peer presenting a controller certificate of
// the network's CA: the leader reads it there to add the member.
const selfPath = "/zmesh/cluster/v1/self"

// ErrNotMember is the error of a cluster operation on a controller that has no cluster
// section, or that is not yet in a cluster.
var ErrNotMember = errors.New("not a member of a cluster")

// startNode starts the raft node on the store when the configuration has a cluster section.
func (c *Controller) startNode() error {
	cc := c.cfg.Cluster
	if cc == nil {
		return nil
	}
	n, err := cluster.New(context.Background(), cluster.Config{
		ID: cc.ID, Dir: cc.DataDir, Bind: cc.Listen, Advertise: cc.Advertise,
		Certificate: func() (*tls.Certificate, error) {
			cert := c.webCert.Get()
			return &cert, nil
		},
		Roots: c.ca.Pool(),
		Store: c.store,
		Log:   c.log.With("component", "cluster"),

		HeartbeatTimeout: cc.HeartbeatTimeout, ElectionTimeout: cc.ElectionTimeout, LeaderLeaseTimeout: cc.LeaderLeaseTimeout,
		SnapshotInterval: cc.SnapshotInterval, SnapshotThreshold: uint64(cc.SnapshotThreshold), TrailingLogs: uint64(cc.TrailingLogs),
		ApplyTimeout: cc.ApplyTimeout,
	})
	if err != nil {
		return err
	}
	c.node = n
	return nil
}

// watchNode returns an error once the raft node fails (its store could not apply a log
// entry: see cluster.Node.Failed), nil when ctx ends first.
func (c *Controller) watchNode(ctx context.Context) error {
	n := c.node
	select {
	case <-n.Failed():
		c.log.Error("this controller stopped following the cluster's log; stopping it", "member", n.ID(), "err", n.Err())
		return fmt.Errorf("cluster member %s: %w", n.ID(), n.Err())
	case <-ctx.Done():
		return nil
	}
}

// Node returns the controller's raft node; nil without a cluster section.
func (c *Controller) Node() *cluster.Node { return c.node }

// noCluster is the error of a cluster operation on a controller without a cluster section.
func (c *Controller) noCluster() error {
	return fmt.Errorf("controller %s has no cluster section in its configuration: %w", c.cfg.API.Advertise, ErrNotMember)
}

// joined returns the raft node and the cluster's configuration, which includes this
// member; an error wrapping ErrNotMember when the controller has no cluster section or is
// not in a cluster yet (neither bootstrapped nor added).
func (c *Controller) joined() (*cluster.Node, []cluster.Member, error) {
	n := c.node
	if n == nil {
		return nil, nil, c.noCluster()
	}
	ms, err := n.Members()
	if err != nil {
		return nil, nil, err
	}
	if !slices.ContainsFunc(ms, func(m cluster.Member) bool { return m.ID == n.ID() }) {
		return nil, nil, fmt.Errorf("controller %s is not in a cluster yet: run zmesh controller cluster init on it to start one, or add it from a member with zmesh controller cluster add: %w", n.ID(), ErrNotMember)
	}
	return n, ms, nil
}

// waitLeader waits until this member leads, or ctx ends.
func waitLeader(ctx context.Context, n *cluster.Node) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for n.State() != "Leader" {
		select {
		case <-ctx.Done():
			return fmt.Errorf("controller %s did not become the leader: %w", n.ID(), ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// selfRecord is this member's record as it is now.
func (c *Controller) selfRecord(n *cluster.Node) ControllerRecord {
	return ControllerRecord{
		ID: n.ID(), RaftAddress: n.Addr(), APIAddress: c.cfg.API.Advertise, CtrlAddress: ctrlEndpoint(c.cfg),
		CertPEM: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.webCert.Get().Leaf.Raw})),
	}
}

// ClusterInit makes the controller, which has a cluster section and no raft state, the first
// member of a new cluster, and creates inside it what the first start of a single controller
// creates: the built-in config types and the default administrator. The records the store
// held already (a single controller turned into a cluster) reach members added later
// through a snapshot taken now, with the log before it compacted, so that a joining member
// is sent the snapshot rather than the log.
func (c *Controller) ClusterInit(ctx context.Context) error {
	n := c.node
	if n == nil {
		return c.noCluster()
	}
	c.initMu.Lock()
	defer c.initMu.Unlock()
	if c.closed {
		return fmt.Errorf("controller %s is stopping", n.ID())
	}
	if _, _, err := c.joined(); err == nil {
		return fmt.Errorf("controller %s is a member of a cluster already: nothing to initialise", n.ID())
	} else if !errors.Is(err, ErrNotMember) {
		return err
	}
	// A store that applied a cluster's log (a removed member, a backup of a member) would
	// skip the new log's first entries, whose indexes it has passed already.
	if idx, _, err := c.store.AppliedIndex(); err != nil {
		return err
	} else if idx > 0 {
		return fmt.Errorf("the store of controller %s has applied a cluster's log up to index %d: a new cluster cannot start from it; start this controller on an empty data directory (with the network's CA imported) and add it from a member", n.ID(), idx)
	}
	if err := n.Bootstrap(); err != nil {
		return err
	}
	if err := waitLeader(ctx, n); err != nil {
		return err
	}
	if err := c.model.EnsureBuiltinConfigTypes(); err != nil {
		return fmt.Errorf("built-in config types: %w", err)
	}
	created, err := c.model.EnsureDefaultAdmin(ctx, c.cfg.Admin.Username, string(c.cfg.Admin.Password))
	if err != nil {
		return fmt.Errorf("default administrator: %w", err)
	}
	if created {
		c.log.Info("created the default administrator", "username", c.cfg.Admin.Username)
	}
	rec := c.selfRecord(n)
	rec.JoinedAt = time.Now().UTC()
	if err := c.store.Update(func(tx *store.Tx) error { return c.members.Put(tx, &rec) }); err != nil {
		return fmt.Errorf("record controller %s: %w", n.ID(), err)
	}
	if err := n.SnapshotCompacted(); err != nil {
		return err
	}
	c.membershipChanged()
	return nil
}

// ClusterAdd adds the controller whose API is at apiAddress (its api.advertise) to the
// cluster: this member, the leader, reads the other's record from its API over mutual TLS
// (both ends present a controller certificate of the network's CA), adds it as a voter and
// records it.
func (c *Controller) ClusterAdd(ctx context.Context, apiAddress string) (ControllerRecord, error) {
	n, _, err := c.joined()
	if err != nil {
		return ControllerRecord{}, err
	}
	ans, err := c.fetchSelf(ctx, apiAddress)
	if err != nil {
		return ControllerRecord{}, err
	}
	rec := ans.ControllerRecord
	history, err := c.store.History()
	if err != nil {
		return ControllerRecord{}, err
	}
	if err := cluster.NeedsFreshStore(ans.AppliedIndex, ans.LogHistory, history); err != nil {
		return ControllerRecord{}, fmt.Errorf("controller %s at %s cannot join: %w; stop it, delete its store (<dataDir>/db) and its raft directory (cluster.dataDir), keep pki/, start it and add it again", rec.ID, apiAddress, err)
	}
	if err := n.AddVoter(ctx, rec.ID, rec.RaftAddress); err != nil {
		return ControllerRecord{}, err
	}
	rec.JoinedAt = time.Now().UTC()
	if err := c.store.Update(func(tx *store.Tx) error { return c.members.Put(tx, &rec) }); err != nil {
		return rec, fmt.Errorf("controller %s was added; record its addresses: %w", rec.ID, err)
	}
	c.membershipChanged()
	return rec, nil
}

// fetchSelf reads the record of the controller whose API is at apiAddress.
func (c *Controller) fetchSelf(ctx context.Context, apiAddress string) (selfAnswer, error) {
	var rec selfAnswer
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		MinVersion: tls.VersionTLS12,
		RootCAs:    c.ca.Pool(),
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			cert := c.webCert.Get()
			return &cert, nil
		},
		VerifyConnection: certid.VerifyController,
	}}}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+apiAddress+selfPath, nil)
	if err != nil {
		return rec, fmt.Errorf("the new member's API address %q: %w", apiAddress, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		var unknown x509.UnknownAuthorityError
		if errors.As(err, &unknown) {
			return rec, fmt.Errorf("the controller at %s has a certificate of another CA: stop it, import this network's CA into its data directory with zmesh controller cluster import-ca before its first start, and add it again: %w", apiAddress, err)
		}
		return rec, fmt.Errorf("read the new member's details from https://%s: %w", apiAddress, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return rec, fmt.Errorf("read the new member's details from https://%s: %w", apiAddress, err)
	}
	if resp.StatusCode != http.StatusOK {
		return rec, fmt.Errorf("the controller at %s answered %s: %s", apiAddress, resp.Status, bytes.TrimSpace(body))
	}
	if err := json.Unmarshal(body, &rec); err != nil || rec.ID == "" || rec.RaftAddress == "" {
		return rec, fmt.Errorf("the controller at %s sent no member details (%v): is it a zmesh controller with a cluster section?", apiAddress, err)
	}
	return rec, nil
}

// serveSelf answers a peer controller (a client certificate of the network's CA with the
// controller's policy) with this member's record.
func (c *Controller) serveSelf(w http.ResponseWriter, r *http.Request) {
	n := c.Node()
	if n == nil {
		http.Error(w, "this controller has no cluster section", http.StatusNotFound)
		return
	}
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		http.Error(w, "a controller certificate is required", http.StatusUnauthorized)
		return
	}
	if err := cluster.VerifyMember(c.ca.Pool())(*r.TLS); err != nil {
		http.Error(w, "a controller certificate of this network's CA is required: "+err.Error(), http.StatusForbidden)
		return
	}
	ans := selfAnswer{ControllerRecord: c.selfRecord(n)}
	var err error
	if ans.AppliedIndex, _, err = c.store.AppliedIndex(); err == nil {
		ans.LogHistory, err = c.store.History()
	}
	if err != nil {
		http.Error(w, "read this controller's store: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(ans)
}

// selfAnswer is a member's record as it serves it to a leader adding it, with where its
// store stands: the leader refuses a store of another log history (cluster.NeedsFreshStore).
type selfAnswer struct {
	ControllerRecord
	AppliedIndex uint64 `json:"appliedIndex"`
	LogHistory   string `json:"logHistory"`
}

// ClusterRemove removes the member id from the cluster and its record. On the leader.
func (c *Controller) ClusterRemove(ctx context.Context, id string) error {
	n, ms, err := c.joined()
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(ms, func(m cluster.Member) bool { return m.ID == id }) {
		return fmt.Errorf("no member %s in the cluster; zmesh controller cluster list shows the members", id)
	}
	if err := n.RemoveServer(ctx, id); err != nil {
		return err
	}
	if id != n.ID() {
		if err := c.store.Update(func(tx *store.Tx) error {
			if ok, err := c.members.Has(tx, id); err != nil || !ok {
				return err
			}
			return c.members.Delete(tx, id)
		}); err != nil {
			return fmt.Errorf("controller %s was removed; delete its record: %w", id, err)
		}
	}
	c.membershipChanged()
	return nil
}

// ClusterTransfer hands the leadership to the member id, or to the readiest follower when
// id is empty.
func (c *Controller) ClusterTransfer(ctx context.Context, id string) error {
	n, _, err := c.joined()
	if err != nil {
		return err
	}
	return n.TransferLeadership(id)
}

// MemberStatus is a member as `cluster list` and the APIs show it.
type MemberStatus struct {
	ControllerRecord
	Voter  bool `json:"voter"`
	Leader bool `json:"leader"`
	// Online: the member is in the cluster's configuration and, for this member, runs.
	Online bool `json:"online"`
}

// ClusterMembers lists the cluster's configuration with the members' records.
func (c *Controller) ClusterMembers() ([]MemberStatus, error) {
	n, ms, err := c.joined()
	if err != nil {
		return nil, err
	}
	recs := map[string]*ControllerRecord{}
	if err := c.store.View(func(tx *store.Tx) error {
		return c.members.Each(tx, func(r *ControllerRecord) error { recs[r.ID] = r; return nil })
	}); err != nil {
		return nil, err
	}
	leader, _ := n.Leader()
	out := make([]MemberStatus, 0, len(ms))
	for _, m := range ms {
		st := MemberStatus{ControllerRecord: ControllerRecord{ID: m.ID, RaftAddress: m.Address}, Voter: m.Voter, Leader: m.ID == leader, Online: true}
		if r := recs[m.ID]; r != nil {
			st.ControllerRecord = *r
			st.RaftAddress = m.Address
		}
		out = append(out, st)
	}
	return out, nil
}

// ctrlEndpoints are the control channel endpoints routers are told: every member's, this
// one's first; only this one's for a single controller.
func (c *Controller) ctrlEndpoints() []string {
	own := ctrlEndpoint(c.cfg)
	out := []string{own}
	if c.node == nil {
		return out
	}
	ms, err := c.ClusterMembers()
	if err != nil {
		return out
	}
	for _, m := range ms {
		if m.CtrlAddress != "" && !slices.Contains(out, m.CtrlAddress) {
			out = append(out, m.CtrlAddress)
		}
	}
	return out
}

// membershipChanged tells the connected routers the members' control channel endpoints,
// when they changed since they were last told.
func (c *Controller) membershipChanged() {
	if c.routers == nil {
		return
	}
	eps := c.ctrlEndpoints()
	c.endpointsMu.Lock()
	defer c.endpointsMu.Unlock()
	if slices.Equal(eps, c.endpointsSent) {
		return
	}
	c.endpointsSent = eps
	for _, rt := range c.routers.All() {
		if err := rt.Channel.SendWithin(5*time.Second, &ctrlproto.EndpointsUpdate{Endpoints: eps}); err != nil {
			c.log.Warn("tell a router the controllers' endpoints", "router", rt.ID, "err", err)
		}
	}
}

// followMembers keeps, until ctx ends, the routers connected to this member told of the
// members' endpoints (a change made through another member reaches this one's store only),
// and, while a leader is known, its own record current (addresses or certificate changed
// since it was written).
func (c *Controller) followMembers(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n, _, err := c.joined()
		if err != nil {
			continue
		}
		if leader, _ := n.Leader(); leader != "" { // a follower's write goes to the leader
			if err := c.refreshOwnRecord(n); err != nil {
				c.log.Warn("update this controller's record in the cluster", "err", err)
			}
		}
		if n.State() == "Leader" {
			if err := c.pruneRecords(n); err != nil {
				c.log.Warn("delete the records of controllers no longer in the cluster", "err", err)
			}
		}
		c.membershipChanged()
	}
}

// refreshOwnRecord writes this member's record when it differs from the stored one.
func (c *Controller) refreshOwnRecord(n *cluster.Node) error {
	self := c.selfRecord(n)
	var stored *ControllerRecord
	if err := c.store.View(func(tx *store.Tx) error {
		if ok, err := c.members.Has(tx, self.ID); err != nil || !ok {
			return err
		}
		var err error
		stored, err = c.members.Get(tx, self.ID)
		return err
	}); err != nil {
		return err
	}
	if stored != nil {
		self.JoinedAt = stored.JoinedAt
		if *stored == self {
			return nil
		}
	} else {
		self.JoinedAt = time.Now().UTC()
	}
	return c.store.Update(func(tx *store.Tx) error { return c.members.Put(tx, &self) })
}

// pruneRecords deletes the records of controllers that are not in the cluster's
// configuration: those of the members a recovery left out (RecoverMember), or one whose
// removal was not followed by its record's deletion. A member's record is written after it
// joined the configuration, so the configuration read after the records includes every
// member whose record was read.
func (c *Controller) pruneRecords(n *cluster.Node) error {
	stale := func(tx *store.Tx) ([]string, error) {
		var recs []string
		if err := c.members.Each(tx, func(r *ControllerRecord) error { recs = append(recs, r.ID); return nil }); err != nil {
			return nil, err
		}
		ms, err := n.Members()
		if err != nil {
			return nil, err
		}
		return slices.DeleteFunc(recs, func(id string) bool {
			return slices.ContainsFunc(ms, func(m cluster.Member) bool { return m.ID == id })
		}), nil
	}
	var found []string
	if err := c.store.View(func(tx *store.Tx) (err error) { found, err = stale(tx); return err }); err != nil || len(found) == 0 {
		return err
	}
	var deleted []string
	if err := c.store.Update(func(tx *store.Tx) error {
		ids, err := stale(tx)
		if err != nil {
			return err
		}
		for _, id := range ids {
			if err := c.members.Delete(tx, id); err != nil {
				return err
			}
		}
		deleted = ids
		return nil
	}); err != nil {
		return err
	}
	if len(deleted) > 0 {
		c.log.Info("deleted the records of controllers no longer in the cluster", "controllers", deleted)
	}
	return nil
}

// clusterStats are the node's figures for health and metrics (Node.Health).
type clusterStats struct {
	cluster.Health
	Member bool // this controller is in the cluster's configuration
}

func (c *Controller) clusterStats() (clusterStats, bool) {
	n := c.Node()
	if n == nil {
		return clusterStats{}, false
	}
	h, err := n.Health()
	if err != nil {
		c.log.Warn("read the cluster's health", "err", err)
	}
	member := slices.ContainsFunc(h.Members, func(m cluster.MemberHealth) bool { return m.ID == n.ID() })
	return clusterStats{Health: h, Member: member}, true
}

// clusterMetrics are the figures of the metrics; none without a cluster section, nor
// while this controller is not in the cluster's configuration.
func (c *Controller) clusterMetrics() (metrics.Cluster, bool) {
	st, ok := c.clusterStats()
	if !ok || !st.Member {
		return metrics.Cluster{}, false
	}
	return metrics.Cluster{Leader: st.State == "Leader", Term: st.Term, CommitIndex: st.CommitIndex, AppliedIndex: st.AppliedIndex,
		ApplyLag: st.ApplyLag, Members: len(st.Members)}, true
}

// checkCluster is the cluster health check: healthy when this member belongs to a cluster
// and can take writes now (a leader with a quorum in contact, or a follower that knows its
// leader).
func (c *Controller) checkCluster(context.Context) (any, error) {
	st, _ := c.clusterStats()
	details := map[string]any{"id": st.ID, "state": st.State, "leader": st.LeaderID, "term": st.Term,
		"commitIndex": st.CommitIndex, "appliedIndex": st.AppliedIndex, "members": len(st.Members)}
	var problem string
	switch {
	case st.Failure != "":
		problem = "this member stopped following the log: " + st.Failure
	case !st.Member:
		problem = "not in a cluster yet: run zmesh controller cluster init on it, or add it from a member"
	case st.LeaderID == "":
		problem = "the cluster has no leader: an election is under way or there is no quorum; writes are refused"
	case !st.Writable:
		problem = "this member leads but hears from no quorum of the members; writes are refused"
	}
	if problem != "" {
		details["error"] = problem
		return details, errors.New(problem)
	}
	return details, nil
}

// controllerList is the API's /controllers: the cluster's members, or this controller alone.
func (c *Controller) controllerList() ([]api.Controller, error) {
	self := api.Controller{ID: controllerID, APIAddress: c.cfg.API.Advertise, CtrlAddress: ctrlEndpoint(c.cfg),
		Cert: c.cert.Leaf, Online: true, Leader: true, JoinedAt: c.started}
	if c.node == nil {
		return []api.Controller{self}, nil
	}
	ms, err := c.ClusterMembers()
	if errors.Is(err, ErrNotMember) {
		self.ID, self.Leader = c.node.ID(), false
		return []api.Controller{self}, nil
	} else if err != nil {
		return nil, err
	}
	out := make([]api.Controller, 0, len(ms))
	for _, m := range ms {
		ctl := api.Controller{ID: m.ID, APIAddress: m.APIAddress, CtrlAddress: m.CtrlAddress, Online: m.Online, Leader: m.Leader, JoinedAt: m.JoinedAt}
		if b, _ := pem.Decode([]byte(m.CertPEM)); b != nil {
			ctl.Cert, _ = x509.ParseCertificate(b.Bytes)
		}
		out = append(out, ctl)
	}
	return out, nil
}
