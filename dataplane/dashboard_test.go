package dataplane

import (
	"crypto/tls"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/zmesh/zmesh/config"
	"github.com/zmesh/zmesh/internal/ctrltest"
	"github.com/zmesh/zmesh/internal/testutil"
)

// The Grafana dashboard of deploy/grafana queries only metrics that a running network
// exports: a controller and two linked routers, each serving its metrics on a web listener,
// after a circuit and an authentication.

// dashboardFile is the dashboard, from this package's directory.
var dashboardFile = filepath.Join("..", "deploy", "grafana", "zmesh.json")

// dashboardQuery is one PromQL query of the dashboard and where it stands.
type dashboardQuery struct {
	where string // the panel's title, or the template variable's name
	expr  string
}

// dashboardQueries reads every query of the dashboard: each target of each panel, rows'
// panels included, and each query variable's query.
func dashboardQueries(t *testing.T, path string) []dashboardQuery {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	type datasource struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	}
	type panel struct {
		Title      string          `json:"title"`
		Type       string          `json:"type"`
		Datasource *datasource     `json:"datasource"`
		Panels     json.RawMessage `json:"panels"`
		Targets    []struct {
			Expr       string      `json:"expr"`
			Datasource *datasource `json:"datasource"`
		} `json:"targets"`
	}
	// Every query goes to the Prometheus server the dashboard's datasource variable names,
	// which the importer chooses.
	variableDS := func(d *datasource) bool { return d != nil && d.Type == "prometheus" && d.UID == "${datasource}" }
	var dash struct {
		Panels     json.RawMessage `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []dashboardQuery
	var walk func(raw json.RawMessage)
	walk = func(raw json.RawMessage) {
		if len(raw) == 0 {
			return
		}
		var panels []panel
		if err := json.Unmarshal(raw, &panels); err != nil {
			t.Fatalf("%s: panels: %v", path, err)
		}
		for _, p := range panels {
			if p.Type != "row" && (len(p.Targets) == 0 || !variableDS(p.Datasource)) {
				t.Errorf("%s: panel %q has no query, or a data source other than ${datasource}", path, p.Title)
			}
			for _, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) == "" || !variableDS(tg.Datasource) {
					t.Errorf("%s: panel %q has a target without expr, or with a data source other than ${datasource}", path, p.Title)
				}
				out = append(out, dashboardQuery{where: "panel " + p.Title, expr: tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(dash.Panels)
	var variables []string
	for _, v := range dash.Templating.List {
		variables = append(variables, v.Type+" "+v.Name)
	}
	for _, want := range []string{"datasource datasource", "query job", "query instance"} {
		if !slices.Contains(variables, want) {
			t.Errorf("%s: no %s variable among %q", path, want, variables)
		}
	}
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		// The query is a string in older dashboards, {query, refId} in newer ones.
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q.Query); err != nil {
			if err := json.Unmarshal(v.Query, &q); err != nil {
				t.Fatalf("%s: variable %s: query %s: %v", path, v.Name, v.Query, err)
			}
		}
		out = append(out, dashboardQuery{where: "variable " + v.Name, expr: q.Query})
	}
	return out
}

var (
	promStrings = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	promBraces  = regexp.MustCompile(`\{[^{}]*\}`)
	promRanges  = regexp.MustCompile(`\[[^\]]*\]`)
	// by (…), without (…), on (…), ignoring (…), group_left (…), group_right (…) list labels.
	promLabelLists = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promVariables  = regexp.MustCompile(`\$\{?\w+\}?`)
	// label_values(metric, label) is Grafana's: its second argument is a label.
	promLabelValues = regexp.MustCompile(`label_values\s*\(([^,()]*),\s*\w+\s*\)`)
	promIdentifier  = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	promKeywords    = []string{"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset", "atan2", "inf", "nan"}
)

// metricNames returns the metric names expr queries: the identifiers left once strings,
// label matchers, ranges, label lists and Grafana's variables are taken out, that are
// neither a function or aggregation (followed by a parenthesis) nor a keyword.
func metricNames(expr string) []string {
	s := promLabelValues.ReplaceAllString(expr, "$1")
	s = promStrings.ReplaceAllString(s, "")
	s = promBraces.ReplaceAllString(s, "")
	s = promRanges.ReplaceAllString(s, "")
	s = promLabelLists.ReplaceAllString(s, "")
	s = promVariables.ReplaceAllString(s, "")
	var names []string
	for _, loc := range promIdentifier.FindAllStringIndex(s, -1) {
		id := s[loc[0]:loc[1]]
		if loc[0] > 0 && (s[loc[0]-1] >= '0' && s[loc[0]-1] <= '9' || s[loc[0]-1] == '.') {
			continue // the exponent or suffix of a number, as in 1e3
		}
		if rest := strings.TrimLeft(s[loc[1]:], " \t\n"); strings.HasPrefix(rest, "(") {
			continue // a function or an aggregation
		}
		if slices.Contains(promKeywords, strings.ToLower(id)) || slices.Contains(names, id) {
			continue
		}
		names = append(names, id)
	}
	return names
}

func TestDashboardMetricNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`zmesh_links{instance=~"$instance"}`, []string{"zmesh_links"}},
		{`sum by (instance, stage) (rate(zmesh_circuits_failed_total{job=~"$job"}[$__rate_interval]))`, []string{"zmesh_circuits_failed_total"}},
		{`histogram_quantile(0.99, sum by (le) (rate(zmesh_api_request_duration_seconds_bucket[5m])))`, []string{"zmesh_api_request_duration_seconds_bucket"}},
		{`topk(10, a_total) / ignoring(x) group_left(y) b offset 5m > bool 1e3`, []string{"a_total", "b"}},
		{`label_values(go_goroutines{job=~"$job"}, instance)`, []string{"go_goroutines"}},
		{`rate(x_total{le="+Inf", q="a}b"}[1m]) and on (instance) y`, []string{"x_total", "y"}},
	} {
		if got := metricNames(tc.expr); !slices.Equal(got, tc.want) {
			t.Errorf("metricNames(%q) = %q, want %q", tc.expr, got, tc.want)
		}
	}
}

// exported adds the names a scrape exports: each family's, and for histograms and
// summaries the series names PromQL queries (_bucket, _sum, _count).
func exported(names map[string][]string, process string, families map[string]*dto.MetricFamily) {
	for name, f := range families {
		series := []string{name}
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			series = append(series, name+"_bucket", name+"_sum", name+"_count")
		case dto.MetricType_SUMMARY:
			series = append(series, name+"_sum", name+"_count")
		}
		for _, s := range series {
			names[s] = append(names[s], process)
		}
	}
}

var webListenerOpen = regexp.MustCompile(`msg="web listener open" name=ops listen=(\S+)`)

func TestGrafanaDashboardMetricsExist(t *testing.T) {
	t.Parallel()
	queries := dashboardQueries(t, dashboardFile)

	// The controller serves its metrics on a web listener of a port the system chooses; its
	// log says which.
	cfg := ctrltest.Config(t)
	cfg.Web = []config.WebListener{{Name: "ops", BindPoints: []config.BindPoint{{Interface: "127.0.0.1:0", Address: "127.0.0.1:0"}},
		APIs: []config.WebAPI{{Binding: config.APIHealthChecks}, {Binding: config.APIMetrics}}}}
	n := &testNet{t: t, dir: t.TempDir(), routers: map[string]*testRouter{}}
	n.ctl = ctrltest.StartWith(t, ctrltest.Options{Config: cfg})
	n.ctrl, n.m, n.ctrlAdr, n.apiAddr = n.ctl.Ctrl, n.ctl.Model, n.ctl.CtrlAddr, n.ctl.APIAddr
	t.Cleanup(n.stop)
	var ctrlWeb string
	testutil.Eventually(t, "the controller's web listener", func() bool {
		m := webListenerOpen.FindStringSubmatch(n.ctl.Logs.String())
		if m != nil {
			ctrlWeb = "https://" + m[1]
		}
		return m != nil
	})

	const probes = "forwarder: {latencyProbeInterval: 100}\n"
	c := n.addRouter("C", false, `link:
  listeners:
    - binding: transport
      bind: tls:127.0.0.1:{{port}}
      advertise: tls:127.0.0.1:{{same}}
      groups: [ac]
`+probes+opsWeb)
	a := n.addRouter("A", true, `link:
  dialers:
    - binding: transport
      groups: [ac]
listeners:
  - binding: tunnel
    options:
      mode: proxy
      services: [data:{{port}}]
`+probes+opsWeb)
	testutil.Eventually(t, "link A–C", func() bool { return n.linked("A", "C") })
	srv := newStreamServer(t)
	n.service("data", "C", srv.addr())
	if err := transfer(srv, a.r.ProxyAddress("data"), 10_000, 10_000, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	n.ctl.Admin(t) // a password authentication over the API

	aClient, aBase := webClient(t, a)
	cClient, cBase := webClient(t, c)
	testutil.Eventually(t, "latency probes measured on both routers", func() bool {
		_, okA := value(getMetrics(t, aClient, aBase), "zmesh_link_latency_seconds")
		_, okC := value(getMetrics(t, cClient, cBase), "zmesh_link_latency_seconds")
		return okA && okC
	})
	ctrlClient := &http.Client{Timeout: 10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: n.ctrl.CA().Pool(), MinVersion: tls.VersionTLS12}}}
	t.Cleanup(ctrlClient.CloseIdleConnections)

	names := map[string][]string{} // series name → processes exporting it
	exported(names, "controller", getMetrics(t, ctrlClient, ctrlWeb))
	exported(names, "router A", getMetrics(t, aClient, aBase))
	exported(names, "router C", getMetrics(t, cClient, cBase))

	checked := 0
	for _, q := range queries {
		used := metricNames(q.expr)
		if len(used) == 0 {
			t.Errorf("%s: query %q names no metric", q.where, q.expr)
		}
		for _, name := range used {
			checked++
			if len(names[name]) == 0 {
				t.Errorf("%s queries %s, which neither the controller nor a router exports (query %q)", q.where, name, q.expr)
			}
		}
	}
	if checked == 0 {
		t.Fatal("the dashboard queries nothing")
	}
	t.Logf("%d queries, %d metric references checked against %d series names", len(queries), checked, len(names))
}
