package interop

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// network is a fresh quickstart network run by `zmesh quickstart` for the suite: a
// controller and two linked routers on 127.0.0.1, with the demo service "echo" hosted by
// router-1 and reached through each router's tunnel proxy port.
type network struct {
	zmesh    string // the zmesh binary
	dir      string // the quickstart directory
	offset   int    // the quickstart's port offset
	api      string // https://127.0.0.1:<port>
	caFile   string // the network's CA, which issued the API's certificate
	pool     *x509.CertPool
	password string // the administrator's
	client   string // the zmesh-written identity file of the quickstart's client
}

// The quickstart's names and default ports (internal/quickstart); every port is shifted by
// the offset.
const (
	echoService     = "echo"
	echoClientsRole = "echo-clients"
	clientName      = "quickstart-client"
	apiPort         = 1280
	proxyBase       = 2000 // router i's tunnel proxy of the echo service: proxyBase + i
	freePortBase    = 2500 // ports of the suite's own listeners: freePortBase + n
)

// echoProxy is router i's tunnel proxy address of the echo service.
func (n *network) echoProxy(i int) string { return "127.0.0.1:" + strconv.Itoa(proxyBase+i+n.offset) }

// freePort is the suite's n-th own port, in the quickstart's range, which holds nothing else.
func (n *network) freePort(i int) int { return freePortBase + i + n.offset }

// startNetwork runs `zmesh quickstart` in a new directory until the test ends. The port
// offset is tried from a few candidates, since another quickstart may hold one.
func startNetwork(t *testing.T, zmesh string) *network {
	t.Helper()
	var failures []string
	for i, offset := range []int{11000, 12000, 13000, 14000, 15000, 16000, 17000, 18000} {
		dir := filepath.Join(t.TempDir(), "quickstart-"+strconv.Itoa(i))
		n, err := runQuickstart(t, zmesh, dir, offset)
		if err == nil {
			return n
		}
		failures = append(failures, fmt.Sprintf("port offset %d: %v", offset, err))
	}
	t.Fatalf("zmesh quickstart did not start:\n%s", strings.Join(failures, "\n"))
	return nil
}

func runQuickstart(t *testing.T, zmesh, dir string, offset int) (*network, error) {
	cmd := exec.Command(zmesh, "quickstart", "--dir", dir, "--routers", "2", "--port-offset", strconv.Itoa(offset))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", zmesh, err)
	}
	ready := make(chan bool, 1)
	var output lockedBuffer
	go func() {
		sc := bufio.NewScanner(stdout)
		signalled := false
		for sc.Scan() {
			fmt.Fprintln(&output, sc.Text())
			if !signalled && strings.HasPrefix(sc.Text(), "quickstart ready") {
				ready <- true
				signalled = true
			}
		}
		if !signalled {
			ready <- false
		}
	}()
	if !<-ready {
		err := cmd.Wait()
		return nil, fmt.Errorf("exited (%v) before it was ready:\n%s%s", err, output.String(), stderr.String())
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Logf("zmesh quickstart ended: %v\n%s", err, stderr.String())
			}
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-done
			t.Errorf("zmesh quickstart did not stop within a minute of SIGINT; killed")
		}
	})
	t.Logf("zmesh quickstart in %s:\n%s", dir, output.String())

	n := &network{zmesh: zmesh, dir: dir, offset: offset, api: fmt.Sprintf("https://127.0.0.1:%d", apiPort+offset),
		caFile: filepath.Join(dir, "router-1", "ca.cert"), client: filepath.Join(dir, "client.json")}
	pw, err := os.ReadFile(filepath.Join(dir, "admin-password"))
	if err != nil {
		return nil, err
	}
	n.password = strings.TrimSpace(string(pw))
	caPEM, err := os.ReadFile(n.caFile)
	if err != nil {
		return nil, err
	}
	n.pool = x509.NewCertPool()
	if !n.pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%s holds no PEM certificate", n.caFile)
	}
	return n, nil
}

// lockedBuffer is a bytes.Buffer safe for a writer and a reader in different goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// The APIs' paths on the controller.
const (
	managementAPI = "/edge/management/v1"
	clientAPI     = "/edge/client/v1"
)

// rest is a minimal client of the controller's REST APIs, for the suite's own setup and for
// checking what a command did: it is not under test.
type rest struct {
	base  string
	http  *http.Client
	token string
}

// apiError is an answer other than 2xx.
type apiError struct {
	method, path string
	status       int
	body         string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%s %s: %d %s", e.method, e.path, e.status, oneLine(e.body))
}

func newREST(n *network) *rest {
	return &rest{base: n.api, http: &http.Client{
		Timeout:   time.Minute,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: n.pool}},
	}}
}

// adminREST is a REST client logged in as the administrator.
func adminREST(t *testing.T, n *network) *rest {
	t.Helper()
	r := newREST(n)
	var out struct {
		Data struct {
			Token string `json:"token"`
		} `json:"data"`
	}
	if err := r.do("POST", managementAPI+"/authenticate?method=password",
		map[string]string{"username": "admin", "password": n.password}, &out); err != nil {
		t.Fatalf("administrator login: %v", err)
	}
	r.token = out.Data.Token
	return r
}

// do sends body as JSON and decodes the answer's JSON into out (either may be nil).
func (r *rest) do(method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, r.base+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.token != "" {
		req.Header.Set("zt-session", r.token)
	}
	resp, err := r.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return &apiError{method, path, resp.StatusCode, string(data)}
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s %s: decode %q: %w", method, path, data, err)
		}
	}
	return nil
}

// create posts body to the management collection typ and returns the new entity's id.
func (r *rest) create(typ string, body any) (string, error) {
	var out struct {
		Data struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := r.do("POST", managementAPI+"/"+typ, body, &out); err != nil {
		return "", err
	}
	if out.Data.ID == "" {
		return "", fmt.Errorf("POST %s/%s: no id in the answer", managementAPI, typ)
	}
	return out.Data.ID, nil
}

// list returns the entities of the management collection typ that filter selects.
func (r *rest) list(typ, filter string) ([]map[string]any, error) {
	var out struct {
		Data []map[string]any `json:"data"`
	}
	path := managementAPI + "/" + typ + "?limit=500"
	if filter != "" {
		path += "&filter=" + url.QueryEscape(filter)
	}
	if err := r.do("GET", path, nil, &out); err != nil {
		return nil, err
	}
	return out.Data, nil
}

// byName returns the entity of collection typ named name, or an error when there is none.
func (r *rest) byName(typ, name string) (map[string]any, error) {
	list, err := r.list(typ, fmt.Sprintf("name = %q", name))
	if err != nil {
		return nil, err
	}
	switch len(list) {
	case 0:
		return nil, fmt.Errorf("no %s named %q", typ, name)
	case 1:
		return list[0], nil
	default:
		return nil, fmt.Errorf("%d %s named %q", len(list), typ, name)
	}
}

// gone reports an error unless collection typ has no entity named name.
func (r *rest) gone(typ, name string) error {
	list, err := r.list(typ, fmt.Sprintf("name = %q", name))
	if err != nil {
		return err
	}
	if len(list) != 0 {
		return fmt.Errorf("%s %q is still there", typ, name)
	}
	return nil
}

// enrollmentJWT returns the one-time token of the identity id's enrollment of method
// ("ott", "updb"), from the identity's detail.
func (r *rest) enrollmentJWT(id, method string) (string, error) {
	var out struct {
		Data struct {
			Enrollment map[string]struct {
				JWT string `json:"jwt"`
			} `json:"enrollment"`
		} `json:"data"`
	}
	if err := r.do("GET", managementAPI+"/identities/"+id, nil, &out); err != nil {
		return "", err
	}
	if e := out.Data.Enrollment[method]; e.JWT != "" {
		return e.JWT, nil
	}
	return "", fmt.Errorf("identity %s has no %s enrollment with a JWT", id, method)
}

// str is a string field of a decoded entity, "" when absent.
func str(m map[string]any, key string) string {
	s, _ := m[key].(string)
	return s
}

// strs is a []string field of a decoded entity.
func strs(m map[string]any, key string) []string {
	list, _ := m[key].([]any)
	out := make([]string, 0, len(list))
	for _, v := range list {
		if s, ok := v.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

var errNoFile = errors.New("no such file")

// fileExists reports errNoFile (wrapped with the path) unless path is a non-empty file.
func fileExists(path string) error {
	fi, err := os.Stat(path)
	if err != nil || fi.Size() == 0 {
		return fmt.Errorf("%s: %w", path, errNoFile)
	}
	return nil
}

// clientSession logs in as the quickstart's client with the certificate of its identity
// file (zmesh's format: PEM fields with a "pem:" prefix) and creates a Dial session of the
// echo service, whose id it returns.
func clientSession(n *network, echoID string) (string, error) {
	data, err := os.ReadFile(n.client)
	if err != nil {
		return "", err
	}
	var file struct {
		ID struct {
			Cert string `json:"cert"`
			Key  string `json:"key"`
		} `json:"id"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		return "", fmt.Errorf("%s: %w", n.client, err)
	}
	cert, err := tls.X509KeyPair([]byte(strings.TrimPrefix(file.ID.Cert, "pem:")), []byte(strings.TrimPrefix(file.ID.Key, "pem:")))
	if err != nil {
		return "", fmt.Errorf("%s: %w", n.client, err)
	}
	r := newREST(n)
	r.http.Transport.(*http.Transport).TLSClientConfig.Certificates = []tls.Certificate{cert}
	var auth struct {
		Data struct {
			Token string `json:"token"`
		} `json:"data"`
	}
	if err := r.do("POST", clientAPI+"/authenticate?method=cert", map[string]any{}, &auth); err != nil {
		return "", err
	}
	r.token = auth.Data.Token
	var sess struct {
		Data struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := r.do("POST", clientAPI+"/sessions", map[string]any{"serviceId": echoID, "type": "Dial"}, &sess); err != nil {
		return "", err
	}
	return sess.Data.ID, nil
}
