package quickstart

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/controlplane"
	"github.com/zmesh/zmesh/controlplane/model"
	"github.com/zmesh/zmesh/internal/atomicfile"
)

// Options say what Prepare makes.
type Options struct {
	// Routers is how many routers to prepare and run, 1 to MaxRouters. A directory made with
	// fewer gets the missing ones; one made with more keeps them, and runs the first Routers.
	Routers int
	// PortOffset shifts every port (0 to MaxPortOffset). nil: the offset the directory was
	// made with, or 0 for a new one. A directory's offset cannot change: its identity files
	// and enrollment tokens name the controller's port.
	PortOffset *int
	// Version is the zmesh version, for the controller's version endpoint.
	Version string
	// Log receives the controller's logs while Prepare opens it.
	Log *slog.Logger
}

// stateVersion is the layout of the directory this package writes; a directory of another
// layout is refused rather than guessed at.
const stateVersion = 1

// state is the content of StateFile.
type state struct {
	Version    int `json:"version"`
	PortOffset int `json:"portOffset"`
}

// Names of the entities Prepare creates besides the routers, the service and the client.
const (
	hostConfigName   = "echo-host"
	dialPolicyName   = "echo-dial"
	bindPolicyName   = "echo-bind"
	routerPolicyName = "quickstart"
	// clientRole is the client identity's role attribute, which the Dial policy grants.
	clientRole = "echo-clients"
	// routerRole is the routers' role attribute.
	routerRole = "quickstart"
)

// Prepare makes dir a quickstart network, or brings an existing one up to date, and returns
// it. Every step finds what an earlier run made and keeps it when it is still valid: the
// password, the controller's data, the routers' enrollments and the client identity file
// survive; what a run interrupted half-way left (a router created but not enrolled, files
// missing or not matching the controller's records) is made again. The controller is opened
// in this process for the preparation and closed before Prepare returns.
func Prepare(dir string, opts Options) (_ *Network, err error) {
	if opts.Routers < 1 || opts.Routers > MaxRouters {
		return nil, fmt.Errorf("routers: %d is not allowed; allowed: 1 to %d", opts.Routers, MaxRouters)
	}
	if o := opts.PortOffset; o != nil && (*o < 0 || *o > MaxPortOffset) {
		return nil, fmt.Errorf("port offset: %d is not allowed; allowed: 0 to %d", *o, MaxPortOffset)
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, fmt.Errorf("quickstart directory: %w", err)
	}
	st, created, err := openDir(dir, opts.PortOffset)
	if err != nil {
		return nil, err
	}
	n := &Network{
		Dir: dir, Created: created, Ports: Ports{Offset: st.PortOffset},
		ControllerConfig: filepath.Join(dir, ControllerFile),
		PasswordFile:     filepath.Join(dir, PasswordFile),
		ClientIdentity:   filepath.Join(dir, ClientFile),
	}
	password, err := ensurePassword(n)
	if err != nil {
		return nil, err
	}
	if err := atomicfile.Write(n.ControllerConfig, []byte(controllerYAML(n.Ports)), 0o600); err != nil {
		return nil, fmt.Errorf("write %s: %w", n.ControllerConfig, err)
	}
	cfg, err := LoadController(n.ControllerConfig, password)
	if err != nil {
		return nil, err
	}
	ctrl, err := controlplane.Open(cfg, opts.Log.With("role", "controller"), controlplane.Build{Version: opts.Version})
	if err != nil {
		return nil, openError(cfg.DataDir, err)
	}
	defer func() {
		if cerr := ctrl.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("close the quickstart's controller: %w", cerr))
		}
	}()
	m := ctrl.Model()
	for i := 1; i <= opts.Routers; i++ {
		r, err := ensureRouter(m, ctrl.CA(), n, i)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", RouterName(i), err)
		}
		n.Routers = append(n.Routers, r)
	}
	svc, err := ensureEchoService(m, n.Ports)
	if err != nil {
		return nil, err
	}
	if err := ensurePolicies(m, svc, n.Routers[0].ID); err != nil {
		return nil, err
	}
	if err := ensureClient(m, ctrl.CA(), n); err != nil {
		return nil, err
	}
	return n, nil
}

// openDir creates dir (mode 0700) with its state file, or reads the state of a quickstart
// directory made earlier. It refuses a directory that holds something else.
func openDir(dir string, offset *int) (st state, created bool, err error) {
	stateFile := filepath.Join(dir, StateFile)
	data, err := os.ReadFile(stateFile)
	switch {
	case err == nil:
		if err := json.Unmarshal(data, &st); err != nil {
			return st, false, fmt.Errorf("%s: %w; it is not a quickstart state file: remove %s to start over", stateFile, err, dir)
		}
		if st.Version != stateVersion {
			return st, false, fmt.Errorf("%s: version %d is not supported; supported: %d (the directory was made by another zmesh version): remove %s to start over",
				stateFile, st.Version, stateVersion, dir)
		}
		if offset != nil && *offset != st.PortOffset {
			return st, false, fmt.Errorf("%s was made with port offset %d and cannot change to %d (its identity files and certificates name the ports): use port offset %d, or remove %s to start over",
				dir, st.PortOffset, *offset, st.PortOffset, dir)
		}
		return st, false, nil
	case !errors.Is(err, fs.ErrNotExist):
		return st, false, fmt.Errorf("read the quickstart state: %w", err)
	}
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return st, false, fmt.Errorf("create the quickstart directory: %w", err)
		}
	case err != nil:
		return st, false, fmt.Errorf("quickstart directory %s: %w", dir, err)
	case len(entries) > 0:
		return st, false, fmt.Errorf("%s is not empty and is not a quickstart directory (it has no %s): choose another directory, or remove it to start over",
			dir, StateFile)
	default:
		// An empty directory made by the user becomes the quickstart's: it will hold keys.
		if err := os.Chmod(dir, 0o700); err != nil {
			return st, false, fmt.Errorf("quickstart directory: %w", err)
		}
	}
	st = state{Version: stateVersion}
	if offset != nil {
		st.PortOffset = *offset
	}
	data, err = json.MarshalIndent(st, "", "  ")
	if err != nil {
		return st, false, err
	}
	if err := atomicfile.Write(stateFile, append(data, '\n'), 0o600); err != nil {
		return st, false, fmt.Errorf("write %s: %w", stateFile, err)
	}
	return st, true, nil
}

// ensurePassword returns the administrator's password, generating it (16 random bytes in hex,
// which never starts with "-" nor needs quoting on a command line) on the first run. The controller stores the administrator on its first start
// only, so a missing password file next to an existing store cannot be replaced.
func ensurePassword(n *Network) (string, error) {
	data, err := os.ReadFile(n.PasswordFile)
	if err == nil {
		password := strings.TrimSpace(string(data))
		if len(password) < 5 {
			return "", fmt.Errorf("%s: the password is shorter than 5 characters; write the administrator's password there, or remove %s to start over", n.PasswordFile, n.Dir)
		}
		return password, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read the administrator's password: %w", err)
	}
	store := filepath.Join(n.Dir, ControllerDataDir, "db")
	if _, err := os.Stat(store); err == nil {
		return "", fmt.Errorf("%s is missing but the controller's store %s exists: the administrator's password is lost; write it to %s, or remove %s to start over",
			n.PasswordFile, store, n.PasswordFile, n.Dir)
	}
	raw := make([]byte, 16)
	rand.Read(raw)
	password := hex.EncodeToString(raw)
	if err := atomicfile.Write(n.PasswordFile, []byte(password+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write the administrator's password: %w", err)
	}
	return password, nil
}

// controllerYAML is the controller's configuration. The password stays in PasswordFile.
func controllerYAML(p Ports) string {
	return fmt.Sprintf(`# The controller of zmesh quickstart, written again on each run of it. The administrator's
# password is in %[5]s.
v: 1
dataDir: %[1]s
api:
  listen: %[2]s
ctrl:
  listen: tls:%[3]s
admin:
  username: %[4]s
  password: ${%[6]s}
`, ControllerDataDir, Addr(p.API()), Addr(p.Ctrl()), AdminUsername, PasswordFile, PasswordEnv)
}

// LoadController reads the quickstart's controller configuration with the administrator's
// password as ${ZMESH_ADMIN_PASSWORD}.
func LoadController(file, password string) (*config.Controller, error) {
	cfg, _, err := config.LoadController(file, func(name string) (string, bool) {
		if name == PasswordEnv {
			return password, true
		}
		return "", false
	})
	if err != nil {
		return nil, fmt.Errorf("the quickstart's controller configuration: %w", err)
	}
	return cfg, nil
}

// ensureEchoService makes the echo service, end-to-end encrypted, with a host.v1 config that
// sends its circuits to the echo server.
func ensureEchoService(m *model.Model, p Ports) (*model.Service, error) {
	hostData := map[string]any{"protocol": "tcp", "address": Host, "port": p.Echo()}
	cfg, err := findByName(m.Configs, func(c *model.Config) string { return c.Name }, hostConfigName)
	if err != nil {
		return nil, err
	}
	switch {
	case cfg == nil:
		cfg = &model.Config{Name: hostConfigName, ConfigTypeID: "host.v1", Data: hostData}
		if err := m.CreateConfig(cfg); err != nil {
			return nil, fmt.Errorf("create config %s: %w", hostConfigName, err)
		}
	case !sameJSON(cfg.Data, hostData) || cfg.ConfigTypeID != "host.v1":
		if _, err := m.UpdateConfig(cfg.ID, func(c *model.Config) error {
			c.ConfigTypeID, c.Data = "host.v1", hostData
			return nil
		}); err != nil {
			return nil, fmt.Errorf("update config %s: %w", hostConfigName, err)
		}
	}
	svc, err := findByName(m.Services, func(s *model.Service) string { return s.Name }, ServiceName)
	if err != nil {
		return nil, err
	}
	if svc == nil {
		svc = &model.Service{Name: ServiceName, EncryptionRequired: true, Configs: []string{cfg.ID}}
		if err := m.CreateService(svc); err != nil {
			return nil, fmt.Errorf("create service %s: %w", ServiceName, err)
		}
		return svc, nil
	}
	if !svc.EncryptionRequired || !slices.Contains(svc.Configs, cfg.ID) {
		if svc, err = m.UpdateService(svc.ID, func(s *model.Service) error {
			s.EncryptionRequired = true
			if !slices.Contains(s.Configs, cfg.ID) {
				s.Configs = append(s.Configs, cfg.ID)
			}
			return nil
		}); err != nil {
			return nil, fmt.Errorf("update service %s: %w", ServiceName, err)
		}
	}
	return svc, nil
}

// ensurePolicies grants the echo service: Dial to the client identity (by its role) and to
// every router's identity (their tunnel proxies dial as them), Bind to the first router's
// identity only, so that every circuit ends at router-1 and crosses the mesh from the
// others. Every identity may use every router, and every service every router.
func ensurePolicies(m *model.Model, svc *model.Service, hostRouterID string) error {
	routers, err := m.EdgeRouters()
	if err != nil {
		return fmt.Errorf("list edge routers: %w", err)
	}
	dialers := []string{"#" + clientRole}
	for i := 1; i <= MaxRouters; i++ {
		for _, r := range routers {
			if r.Name == RouterName(i) {
				dialers = append(dialers, "@"+r.ID)
			}
		}
	}
	for _, p := range []model.ServicePolicy{
		{Name: dialPolicyName, Type: model.PolicyDial, IdentityRoles: dialers},
		{Name: bindPolicyName, Type: model.PolicyBind, IdentityRoles: []string{"@" + hostRouterID}},
	} {
		p.Semantic, p.ServiceRoles = model.SemanticAny, []string{"@" + svc.ID}
		cur, err := findByName(m.ServicePolicies, func(sp *model.ServicePolicy) string { return sp.Name }, p.Name)
		if err != nil {
			return err
		}
		switch {
		case cur == nil:
			if err := m.CreateServicePolicy(&p); err != nil {
				return fmt.Errorf("create service policy %s: %w", p.Name, err)
			}
		case cur.Type != p.Type || cur.Semantic != p.Semantic || !slices.Equal(cur.IdentityRoles, p.IdentityRoles) ||
			!slices.Equal(cur.ServiceRoles, p.ServiceRoles) || len(cur.PostureCheckRoles) > 0:
			if _, err := m.UpdateServicePolicy(cur.ID, func(sp *model.ServicePolicy) error {
				sp.Type, sp.Semantic, sp.IdentityRoles, sp.ServiceRoles, sp.PostureCheckRoles = p.Type, p.Semantic, p.IdentityRoles, p.ServiceRoles, nil
				return nil
			}); err != nil {
				return fmt.Errorf("update service policy %s: %w", p.Name, err)
			}
		}
	}
	all := []string{"#all"}
	erp, err := findByName(m.EdgeRouterPolicies, func(p *model.EdgeRouterPolicy) string { return p.Name }, routerPolicyName)
	if err != nil {
		return err
	}
	if erp == nil {
		if err := m.CreateEdgeRouterPolicy(&model.EdgeRouterPolicy{Name: routerPolicyName, Semantic: model.SemanticAny, IdentityRoles: all, EdgeRouterRoles: all}); err != nil {
			return fmt.Errorf("create edge router policy %s: %w", routerPolicyName, err)
		}
	}
	serp, err := findByName(m.ServiceEdgeRouterPolicies, func(p *model.ServiceEdgeRouterPolicy) string { return p.Name }, routerPolicyName)
	if err != nil {
		return err
	}
	if serp == nil {
		if err := m.CreateServiceEdgeRouterPolicy(&model.ServiceEdgeRouterPolicy{Name: routerPolicyName, Semantic: model.SemanticAny, ServiceRoles: all, EdgeRouterRoles: all}); err != nil {
			return fmt.Errorf("create service edge router policy %s: %w", routerPolicyName, err)
		}
	}
	return nil
}

// findByName returns the entity of list named name, or nil.
func findByName[T any](list func() ([]*T, error), nameOf func(*T) string, name string) (*T, error) {
	all, err := list()
	if err != nil {
		return nil, fmt.Errorf("look up %q: %w", name, err)
	}
	for _, e := range all {
		if nameOf(e) == name {
			return e, nil
		}
	}
	return nil, nil
}

// sameJSON reports whether a and b encode to the same JSON (a stored config's numbers come
// back as float64).
func sameJSON(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(x, y)
}
