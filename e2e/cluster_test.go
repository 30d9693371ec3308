package e2e

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"

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
// namespace of its own, and two routers told of one member: while four clients create 1,000
// identities through all three members and a circuit through the two routers carries 256
// MiB, the leader is killed (SIGKILL); a new leader is elected, every identity answered 201
// is on both survivors, the 256 MiB come back byte-identical, the routers make new circuits
// with the survivors and their endpoints files list every member, and the killed member,
// started again, catches up. A member
// stopped with SIGSTOP while writes go on leaves the others taking writes and catches up when
// continued. A member removed, emptied and added again catches up from a snapshot. The CLI
// keeps working with one member down. A second member lost for good leaves the third
// without a quorum; recovered as a cluster of itself alone, it leads with every record, the
// routers follow it, the lost member on its old directory is refused, and a member added
// afresh catches up.
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

	// Two routers, A and B, linked, enrolled through the cluster and told of member a only;
	// B hosts the service "echo" (a server in the namespace), A proxies it on a local port.
	admin := client(a)
	create := func(path string, body any) string {
		t.Helper()
		var out struct {
			ID string `json:"id"`
		}
		if _, err := admin.Do(ctx, "POST", apiclient.ManagementAPI+path, body, &out); err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		return out.ID
	}
	echoAddr := serveEcho(t, ns)
	routerIDs := map[string]string{}
	routerFiles := map[string]string{}
	for _, r := range []struct{ name, extra string }{
		{"A", `link:
  listeners:
    - binding: transport
      bind: tls:127.0.0.1:16000
      advertise: tls:127.0.0.1:16000
listeners:
  - binding: tunnel
    options:
      mode: proxy
      services: [echo:18080]
`},
		{"B", `link:
  dialers:
    - binding: transport
listeners:
  - binding: tunnel
    options:
      mode: host
`},
	} {
		id := create("/edge-routers", map[string]any{"name": r.name, "isTunnelerEnabled": true})
		var detail struct {
			EnrollmentJWT string `json:"enrollmentJwt"`
		}
		if _, err := admin.Do(ctx, "GET", apiclient.ManagementAPI+"/edge-routers/"+id, nil, &detail); err != nil {
			t.Fatal(err)
		}
		rdir := filepath.Join(dir, "router-"+r.name)
		file := writeFile(t, filepath.Join(rdir, "router.yml"), fmt.Sprintf(`v: 3
identity:
  cert: certs/client.cert
  server_cert: certs/server.cert
  key: certs/router.key
  ca: certs/ca.cert
ctrl:
  endpoint: tls:127.0.0.1:16262
edge:
  csr:
    sans:
      ip: [127.0.0.1]
%s`, r.extra))
		jwt := writeFile(t, filepath.Join(rdir, "router.jwt"), detail.EnrollmentJWT)
		run(t, ns, time.Minute, bin, "router", "enroll", file, "--jwt", jwt)
		routerIDs[r.name], routerFiles[r.name] = id, file
	}
	create("/edge-router-policies", map[string]any{"name": "all", "semantic": "AnyOf", "identityRoles": []string{"#all"}, "edgeRouterRoles": []string{"#all"}})
	create("/service-edge-router-policies", map[string]any{"name": "all", "semantic": "AnyOf", "serviceRoles": []string{"#all"}, "edgeRouterRoles": []string{"#all"}})
	echoHost, echoPort, _ := strings.Cut(echoAddr, ":")
	port, _ := strconv.Atoi(echoPort)
	hc := create("/configs", map[string]any{"name": "echo-host", "configTypeId": "host.v1", "data": map[string]any{"protocol": "tcp", "address": echoHost, "port": port}})
	create("/services", map[string]any{"name": "echo", "configs": []string{hc}})
	create("/service-policies", map[string]any{"name": "A-dials", "type": "Dial", "semantic": "AnyOf", "identityRoles": []string{"@" + routerIDs["A"]}, "serviceRoles": []string{"#all"}})
	create("/service-policies", map[string]any{"name": "B-binds", "type": "Bind", "semantic": "AnyOf", "identityRoles": []string{"@" + routerIDs["B"]}, "serviceRoles": []string{"#all"}})
	routerB := start(t, ns, "router B", procOptions{}, bin, "router", "run", routerFiles["B"])
	routerA := start(t, ns, "router A", procOptions{}, bin, "router", "run", routerFiles["A"])
	routerA.waitOutput(t, "link up")
	routerB.waitOutput(t, "link up")
	// echoOnce makes a circuit through A and B and checks the echo.
	echoOnce := func() error {
		var conn net.Conn
		err := netnstest.Run(ns, func() (err error) {
			conn, err = net.DialTimeout("tcp", "127.0.0.1:18080", 10*time.Second)
			return err
		})
		if err != nil {
			return err
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := conn.Write([]byte("ping")); err != nil {
			return err
		}
		got := make([]byte, 4)
		if _, err := io.ReadFull(conn, got); err != nil {
			return err
		}
		if string(got) != "ping" {
			return fmt.Errorf("echo %q", got)
		}
		return nil
	}
	testutil.EventuallyNil(t, "a circuit through routers A and B", echoOnce)

	// 256 MiB through one circuit, paused after 64 MiB until the leader has been killed.
	const transferSize, pauseAt = 256 << 20, 64 << 20
	transferPaused, leaderKilled := make(chan struct{}), make(chan struct{})
	transferDone := make(chan error, 1)
	go func() {
		transferDone <- carry(ns, "127.0.0.1:18080", transferSize, pauseAt, transferPaused, leaderKilled)
	}()

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
	select {
	case <-transferPaused:
	case err := <-transferDone:
		t.Fatalf("the transfer ended before its pause: %v", err)
	}
	if err := killed.proc.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-killed.proc.done
	killedAt := time.Now()
	close(leaderKilled)
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
	if err := <-transferDone; err != nil {
		t.Errorf("256 MiB through routers A and B across the leader's death: %v", err)
	}
	// The routers go on with the survivors: a new circuit, and the members in their
	// endpoints files.
	testutil.EventuallyNil(t, "a new circuit after the leader's death", echoOnce)
	for name, file := range routerFiles {
		eps := string(readFile(t, filepath.Join(filepath.Dir(file), "endpoints")))
		for i := range members {
			if want := fmt.Sprintf("127.0.0.1:%d", 16262+i); !strings.Contains(eps, want) {
				t.Errorf("router %s's endpoints file lacks %s:\n%s", name, want, eps)
			}
		}
	}

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

	// Disaster: b is lost too, for good, and c alone has no quorum: it takes no write.
	// Stopped, recovered as a cluster of itself alone and started again, it leads with every
	// record, takes writes, the routers make circuits through it and learn that the
	// cluster is c alone, and a member added from an empty directory catches up from its
	// snapshot.
	if err := b.proc.stop(syscall.SIGKILL, time.Minute); err == nil {
		t.Log("b ended with status 0 on SIGKILL")
	}
	env := []string{"env", "HOME=" + home, bin}
	if out, err := runErr(t, ns, time.Minute, append(env, "edge", "create", "identity", "without-quorum")...); err == nil || !strings.Contains(out, "503") {
		t.Errorf("a write on c alone, without a quorum: %v\n%s", err, out)
	}
	if out := cli("edge", "list", "identities", "name contains \"cli-with-a-down\""); !strings.Contains(out, "cli-with-a-down") {
		t.Errorf("a list on c alone, without a quorum: %s", out)
	}
	if err := c.proc.stop(syscall.SIGTERM, time.Minute); err != nil {
		t.Fatalf("stop c: %v", err)
	}
	if out := cluster(c, "recover", "--dry-run"); !strings.Contains(out, "configuration found:") || strings.Count(out, " at 127.0.0.1:") != 3 {
		t.Errorf("recover --dry-run on c:\n%s", out)
	}
	if out := cluster(c, "recover"); !strings.Contains(out, "recovered: c is a cluster of itself alone") {
		t.Errorf("recover on c:\n%s", out)
	}
	startMember(c)
	testutil.EventuallyNil(t, "c leads after its recovery", func() error {
		if l := leaderOf(c); l != c.id {
			return fmt.Errorf("leader %q", l)
		}
		return nil
	})
	if got := names(c, "kill-"); len(got) < len(created) {
		t.Errorf("c holds %d of the %d identities answered 201 after its recovery", len(got), len(created))
	}
	if out := cli("edge", "create", "identity", "after-recovery"); !strings.Contains(out, "created identity") {
		t.Errorf("create after the recovery: %s", out)
	}
	testutil.EventuallyNil(t, "a new circuit through the recovered cluster", echoOnce)
	for name, file := range routerFiles {
		testutil.EventuallyNil(t, "router "+name+"'s endpoints file lists c alone", func() error {
			eps := string(readFile(t, filepath.Join(filepath.Dir(file), "endpoints")))
			if !strings.Contains(eps, "127.0.0.1:16264") || strings.Contains(eps, "127.0.0.1:16262") || strings.Contains(eps, "127.0.0.1:16263") {
				return fmt.Errorf("endpoints file:\n%s", eps)
			}
			return nil
		})
	}
	// b, lost, comes back on its old directory: its store holds entries under indexes the
	// recovered cluster gives to others, so c refuses to add it.
	startMember(b)
	if out, err := runErr(t, ns, time.Minute, bin, "controller", "cluster", "add", b.api, "--config", c.file); err == nil || !strings.Contains(out, "another log history") {
		t.Errorf("add b, lost before the recovery, on its old directory: %v\n%s", err, out)
	}
	if err := b.proc.stop(syscall.SIGTERM, time.Minute); err != nil {
		t.Fatalf("stop b: %v", err)
	}
	if err := os.RemoveAll(a.dataDir); err != nil {
		t.Fatal(err)
	}
	cluster(a, "import-ca", caCert, caKey)
	startMember(a)
	cluster(c, "add", a.api)
	testutil.EventuallyNil(t, "a, added afresh, catches up", func() error {
		if got := names(a, "after-recovery"); len(got) != 1 {
			return fmt.Errorf("%d of 1", len(got))
		}
		return nil
	})
	if !strings.Contains(a.proc.out.String(), "Installed remote snapshot") {
		t.Errorf("a caught up without installing a snapshot")
	}
	if out := cluster(c, "list"); strings.Count(out, "\n") != 3 || strings.Contains(out, "\nb ") {
		t.Errorf("cluster list after the recovery and a's addition, want a and c:\n%s", out)
	}
}

// serveEcho serves, on a loopback port of namespace ns, a TCP echo, and returns its address.
func serveEcho(t *testing.T, ns netns.NsHandle) string {
	t.Helper()
	var ln net.Listener
	if err := netnstest.Run(ns, func() (err error) {
		ln, err = net.Listen("tcp4", "127.0.0.1:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// carry sends size pseudo-random bytes through an echo at addr (dialed in ns) and checks
// that the same bytes come back; after pauseAt bytes came back it closes paused and waits
// for resume before it goes on.
func carry(ns netns.NsHandle, addr string, size, pauseAt int, paused, resume chan struct{}) error {
	var conn net.Conn
	if err := netnstest.Run(ns, func() (err error) {
		conn, err = net.DialTimeout("tcp", addr, 10*time.Second)
		return err
	}); err != nil {
		return err
	}
	defer conn.Close()
	data := make([]byte, size)
	rand.NewChaCha8([32]byte{1}).Read(data)
	sent := make(chan error, 1)
	go func() {
		_, err := conn.Write(data)
		sent <- err
	}()
	got := make([]byte, size)
	if _, err := io.ReadFull(conn, got[:pauseAt]); err != nil {
		return fmt.Errorf("after %d bytes: %w", pauseAt, err)
	}
	close(paused)
	<-resume
	if _, err := io.ReadFull(conn, got[pauseAt:]); err != nil {
		return fmt.Errorf("after the pause: %w", err)
	}
	if err := <-sent; err != nil {
		return err
	}
	if !bytes.Equal(got, data) {
		return errors.New("the bytes that came back differ from those sent")
	}
	return nil
}
