package e2e

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/zmesh/zmesh/internal/apiclient"
	"github.com/zmesh/zmesh/internal/netnstest"
	"github.com/zmesh/zmesh/internal/testutil"
)

// clusterMember is a controller process of a cluster under test.
type clusterMember struct {
	id, file, dataDir, api string
	proc                   *proc
}

// TestControllerCluster runs three controller processes as a cluster on loopback in a
// namespace of its own: while four clients create 1,000 identities through all three
// members, the leader is killed (SIGKILL); a new leader is elected, every identity answered
// 201 is on both survivors, and the killed member, started again, catches up. A member
// stopped with SIGSTOP while writes go on leaves the others taking writes and catches up when
// continued. A member removed, emptied and added again catches up from a snapshot. The CLI
// keeps working with one member down.
func TestControllerCluster(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: runs the controllers in a network namespace of its own")
	}
	ctx := t.Context()
	dir := t.TempDir()
	bin := buildZmesh(t, dir)
	ns := netnstest.New(t, "cluster")
	t.Setenv("ZMESH_ADMIN_PASSWORD", adminPassword) // the cluster commands read the configuration too

	members := make([]*clusterMember, 3)
	for i, id := range []string{"a", "b", "c"} {
		m := &clusterMember{id: id, dataDir: filepath.Join(dir, id, "data"), api: fmt.Sprintf("127.0.0.1:%d", 11280+i)}
		// A small snapshot threshold and log tail, so that a member added again is sent a
		// snapshot rather than the log.
		m.file = writeFile(t, filepath.Join(dir, id, "controller.yml"), fmt.Sprintf(`v: 1
dataDir: %s
api:
  listen: %s
ctrl:
  listen: tls:127.0.0.1:%d
admin:
  username: admin
  password: ${ZMESH_ADMIN_PASSWORD}
cluster:
  id: %s
  listen: 127.0.0.1:%d
  snapshotThreshold: 64
  trailingLogs: 16
`, m.dataDir, m.api, 16262+i, id, 17363+i))
		members[i] = m
	}
	a, b, c := members[0], members[1], members[2]
	cluster := func(m *clusterMember, args ...string) string {
		t.Helper()
		return run(t, ns, time.Minute, append([]string{bin, "controller", "cluster"}, append(args, "--config", m.file)...)...)
	}
	startMember := func(m *clusterMember) {
		t.Helper()
		m.proc = start(t, ns, "controller "+m.id, procOptions{env: []string{"ZMESH_ADMIN_PASSWORD=" + adminPassword}},
			bin, "controller", "run", "--config", m.file)
		m.proc.waitOutput(t, "controller API listening")
	}
	startMember(a)
	cluster(a, "init")
	// The network's CA, kept aside as an operator keeps it: a's directory is emptied below.
	caCert := writeFile(t, filepath.Join(dir, "ca", "ca.cert"), string(readFile(t, filepath.Join(a.dataDir, "pki", "ca.cert"))))
	caKey := writeFile(t, filepath.Join(dir, "ca", "ca.key"), string(readFile(t, filepath.Join(a.dataDir, "pki", "ca.key"))))
	for _, m := range []*clusterMember{b, c} {
		cluster(m, "import-ca", caCert, caKey)
		startMember(m)
		cluster(a, "add", m.api)
	}
	if out := cluster(b, "list"); strings.Count(out, "true") < 4 { // three voters, one leader
		t.Fatalf("cluster list on b:\n%s", out)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(readFile(t, caCert)) {
		t.Fatal("a's CA certificate does not parse")
	}
	// client returns an administrator's client of the member m, failing over to the others.
	client := func(first *clusterMember) *apiclient.Client {
		t.Helper()
		urls := []string{"https://" + first.api}
		for _, m := range members {
			if m != first {
				urls = append(urls, "https://"+m.api)
			}
		}
		cl := apiclient.NewMulti(urls, roots, nil)
		cl.HTTP.Transport.(*http.Transport).DialContext = netnstest.Dialer{NS: ns}.DialContext
		testutil.EventuallyNil(t, "an administrator's login through "+first.id, func() error {
			_, err := cl.AuthenticatePassword(ctx, "admin", adminPassword)
			return err
		})
		return cl
	}
	// names lists the identities named with prefix that member m holds, read from m alone.
	names := func(m *clusterMember, prefix string) map[string]int {
		t.Helper()
		cl := apiclient.New("https://"+m.api, roots, nil)
		cl.HTTP.Transport.(*http.Transport).DialContext = netnstest.Dialer{NS: ns}.DialContext
		testutil.EventuallyNil(t, "a login on "+m.id, func() error {
			_, err := cl.AuthenticatePassword(ctx, "admin", adminPassword)
			return err
		})
		out := map[string]int{}
		for offset := 0; ; offset += 500 {
			var page []struct {
				Name string `json:"name"`
			}
			p, err := cl.Do(ctx, "GET", fmt.Sprintf("%s/identities?limit=500&offset=%d&filter=%s", apiclient.ManagementAPI, offset,
				url.QueryEscape(fmt.Sprintf(`name contains "%s"`, prefix))), nil, &page)
			if err != nil {
				t.Fatalf("list identities on %s: %v", m.id, err)
			}
			for _, it := range page {
				out[it.Name]++
			}
			if p == nil || offset+len(page) >= p.TotalCount || len(page) == 0 {
				return out
			}
		}
	}
	leaderOf := func(m *clusterMember) string {
		out := run(t, ns, time.Minute, bin, "controller", "cluster", "list", "--config", m.file)
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) == 6 && f[5] == "true" {
				return f[0]
			}
		}
		return ""
	}

	// 1,000 identities from four clients, one per member and one more on a; the leader is
	// killed after the first 200 answers.
	const total, writers = 1000, 4
	var (
		mu      sync.Mutex
		created = map[string]bool{} // answered 201
		failed  = map[string]error{}
		answers int
	)
	leader := leaderOf(a)
	var killed *clusterMember
	for _, m := range members {
		if m.id == leader {
			killed = m
		}
	}
	if killed == nil {
		t.Fatalf("no leader in cluster list: %q", leader)
	}
	killNow := make(chan struct{})
	var wg sync.WaitGroup
	for w := range writers {
		cl := client(members[w%len(members)])
		wg.Go(func() {
			for i := w; i < total; i += writers {
				name := fmt.Sprintf("kill-%04d", i)
				_, err := cl.Do(ctx, "POST", apiclient.ManagementAPI+"/identities", map[string]any{"name": name, "type": "User", "isAdmin": false}, nil)
				mu.Lock()
				if err == nil {
					created[name] = true
				} else {
					failed[name] = err
				}
				answers++
				if answers == 200 {
					close(killNow)
				}
				mu.Unlock()
			}
		})
	}
	<-killNow
	if err := killed.proc.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-killed.proc.done
	killedAt := time.Now()
	var survivors []*clusterMember
	for _, m := range members {
		if m != killed {
			survivors = append(survivors, m)
		}
	}
	var newLeader string
	testutil.EventuallyNil(t, "a new leader among the survivors", func() error {
		if l := leaderOf(survivors[0]); l != "" && l != killed.id {
			newLeader = l
			return nil
		}
		return errors.New("none yet")
	})
	election := time.Since(killedAt)
	wg.Wait()
	t.Logf("leader %s killed after 200 answers; %s leads %v later (an upper bound: the list is read by a command); %d created, %d refused",
		killed.id, newLeader, election.Round(time.Millisecond), len(created), len(failed))
	if election > 5*time.Second {
		t.Errorf("the new leader was known %v after the kill, want within 5 s", election)
	}
	for name, err := range failed {
		t.Logf("%s: %v", name, err)
		if !strings.Contains(err.Error(), "HTTP 503") && !strings.Contains(err.Error(), "may have carried it out") {
			t.Errorf("%s refused with %v, want a 503 or a connection that broke after the request was sent", name, err)
		}
	}
	for _, m := range survivors {
		got := names(m, "kill-")
		for name := range created {
			if got[name] != 1 {
				t.Errorf("%s answered 201 but %s holds it %d times", name, m.id, got[name])
			}
		}
		for name, n := range got {
			if n != 1 {
				t.Errorf("%s holds %s %d times", m.id, name, n)
			}
		}
	}

	// The killed member, started again, catches up.
	startMember(killed)
	testutil.EventuallyNil(t, killed.id+" catches up after its restart", func() error {
		if got := names(killed, "kill-"); len(got) < len(created) {
			return fmt.Errorf("%d of %d", len(got), len(created))
		}
		return nil
	})

	// SIGSTOP a follower while writes go on through the others: they take them; continued,
	// it catches up.
	leader = leaderOf(a)
	var paused *clusterMember
	var others []*clusterMember
	for _, m := range members {
		if m.id != leader && paused == nil {
			paused = m
		} else {
			others = append(others, m)
		}
	}
	if err := paused.proc.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	cl := client(others[1])
	for i := range 100 {
		body := map[string]any{"name": fmt.Sprintf("paused-%03d", i), "type": "User", "isAdmin": false}
		if _, err := cl.Do(ctx, "POST", apiclient.ManagementAPI+"/identities", body, nil); err != nil {
			t.Fatalf("write %d with %s stopped: %v", i, paused.id, err)
		}
	}
	if err := paused.proc.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyNil(t, paused.id+" catches up after SIGCONT", func() error {
		if got := names(paused, "paused-"); len(got) != 100 {
			return fmt.Errorf("%d of 100", len(got))
		}
		return nil
	})

	// Remove a follower, empty its directory, write past the log tail, add it again: it
	// catches up from a snapshot.
	leader = leaderOf(a)
	var leaderM, removed *clusterMember
	for _, m := range members {
		switch {
		case m.id == leader:
			leaderM = m
		case removed == nil:
			removed = m
		}
	}
	cluster(leaderM, "remove", removed.id)
	if err := removed.proc.stop(syscall.SIGTERM, time.Minute); err != nil {
		t.Fatalf("stop %s: %v", removed.id, err)
	}
	if err := os.RemoveAll(removed.dataDir); err != nil {
		t.Fatal(err)
	}
	cl = client(leaderM)
	for i := range 200 {
		body := map[string]any{"name": fmt.Sprintf("away-%03d", i), "type": "User", "isAdmin": false}
		if _, err := cl.Do(ctx, "POST", apiclient.ManagementAPI+"/identities", body, nil); err != nil {
			t.Fatalf("write %d with %s removed: %v", i, removed.id, err)
		}
	}
	cluster(removed, "import-ca", caCert, caKey)
	startMember(removed)
	cluster(leaderM, "add", removed.api)
	testutil.EventuallyNil(t, removed.id+" catches up from a snapshot", func() error {
		if got := names(removed, "away-"); len(got) != 200 {
			return fmt.Errorf("%d of 200", len(got))
		}
		return nil
	})
	if !strings.Contains(removed.proc.out.String(), "Installed remote snapshot") {
		t.Errorf("%s caught up without installing a snapshot", removed.id)
	}

	// The CLI, logged in with every member, keeps working with one of them down.
	home := filepath.Join(dir, "home")
	cli := func(args ...string) string {
		t.Helper()
		cmd := append([]string{"env", "HOME=" + home, bin}, args...)
		return run(t, ns, time.Minute, cmd...)
	}
	cli("edge", "login", "https://"+a.api, "https://"+b.api, "https://"+c.api, "-u", "admin", "-p", adminPassword, "-y")
	if err := a.proc.stop(syscall.SIGKILL, time.Minute); err == nil {
		t.Log("a ended with status 0 on SIGKILL")
	}
	if out := cli("edge", "create", "identity", "cli-with-a-down"); !strings.Contains(out, "created identity") {
		t.Errorf("create with a down: %s", out)
	}
	if out := cli("edge", "list", "identities", "name contains \"cli-with-a-down\""); !strings.Contains(out, "cli-with-a-down") {
		t.Errorf("list with a down: %s", out)
	}
}
