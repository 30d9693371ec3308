package main

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/zmesh/zmesh/internal/apiclient"
)

// fabricBase is the base path of the controller's fabric management API.
const fabricBase = "/fabric/v1"

// fabricType is an entity type of the fabric API as zmesh fabric list shows it. derive, when
// set, adds to each item the computed cells its columns name (a circuit's path, a link's
// latency).
type fabricType struct {
	plural, short string
	columns       []column
	derive        func(item map[string]any, now time.Time)
}

func fabricTypes() []fabricType {
	return []fabricType{
		{plural: "routers", short: "the routers, whether their control channel is connected and their version", columns: []column{
			{"ID", "id"}, {"NAME", "name"}, {"ONLINE", "connected"}, {"VERSION", "versionInfo.version"},
			{"COST", "cost"}, {"DISABLED", "disabled"}, {"LISTENERS", "listeners"},
		}, derive: deriveRouter},
		{plural: "links", short: "the links between routers and their latency", columns: []column{
			{"ID", "id"}, {"ROUTER", "sourceRouter.name"}, {"PEER", "destRouter.name"}, {"PROTOCOL", "protocol"},
			{"LATENCY", "latency"}, {"COST", "cost"}, {"STATE", "state"},
		}, derive: deriveLink},
		{plural: "circuits", short: "the circuits: service, dialing identity, age and path", columns: []column{
			{"ID", "id"}, {"SERVICE", "service.name"}, {"IDENTITY", "clientId"}, {"TERMINATOR", "terminator.id"},
			{"AGE", "age"}, {"PATH", "pathText"},
		}, derive: deriveCircuit},
		{plural: "services", short: "the services and their terminator strategy", columns: []column{
			{"ID", "id"}, {"NAME", "name"}, {"TERMINATOR STRATEGY", "terminatorStrategy"},
		}},
		{plural: "terminators", short: "the terminators: service, router, binding and address", columns: []column{
			{"ID", "id"}, {"SERVICE", "service.name"}, {"ROUTER", "router.name"}, {"BINDING", "binding"},
			{"ADDRESS", "address"}, {"COST", "cost"}, {"PRECEDENCE", "precedence"}, {"HOST", "hostId"},
		}},
	}
}

// newFabricCommand builds zmesh fabric: the fabric management API, with the session of
// zmesh edge login.
func newFabricCommand() *cobra.Command {
	f := &edgeFlags{}
	cmd := &cobra.Command{
		Use:   "fabric",
		Short: "Show the mesh through the controller's fabric API: routers, links, circuits",
		PersistentPreRunE: func(*cobra.Command, []string) error {
			return f.checkOutput()
		},
	}
	cmd.PersistentFlags().StringVar(&f.sessionFile, "session-file", defaultSessionFile(), "where the login session of zmesh edge login is kept")
	f.addProfileFlag(cmd)
	cmd.PersistentFlags().StringVarP(&f.output, "output", "o", "text", "output format: text or json")
	cmd.AddCommand(newFabricListCommand(f), newFabricDeleteCommand(f))
	return cmd
}

func newFabricListCommand(f *edgeFlags) *cobra.Command {
	list := typeVerb("list", "List routers, links, circuits, services or terminators", "routers, links, circuits, services, terminators")
	for _, t := range fabricTypes() {
		var filterFlag string
		cmd := &cobra.Command{
			Use:     t.plural + " [FILTER]",
			Aliases: []string{strings.TrimSuffix(t.plural, "s")},
			Short:   "List " + t.short + `; FILTER e.g. 'name contains "web" limit 50'`,
			Args:    argCount(0, 1),
			RunE: func(cmd *cobra.Command, pos []string) error {
				filter, err := filterOf(filterFlag, pos)
				if err != nil {
					return err
				}
				c, err := f.client()
				if err != nil {
					return err
				}
				path := fabricBase + "/" + t.plural
				if filter != "" {
					path += "?" + url.Values{"filter": {filter}}.Encode()
				}
				var items []map[string]any
				page, err := c.Do(cmd.Context(), "GET", path, nil, &items)
				if err != nil {
					return err
				}
				if f.output == "json" {
					return printJSON(cmd, listAnswer(items, page))
				}
				if t.derive != nil {
					now := time.Now()
					for _, it := range items {
						t.derive(it, now)
					}
				}
				return printTable(cmd.OutOrStdout(), cmd.ErrOrStderr(), t.columns, items, page)
			},
		}
		cmd.Flags().StringVar(&filterFlag, "filter", "", "the filter, as an alternative to the argument")
		list.AddCommand(cmd)
	}
	return list
}

func newFabricDeleteCommand(f *edgeFlags) *cobra.Command {
	del := typeVerb("delete", "End a circuit", "circuit")
	del.AddCommand(&cobra.Command{
		Use:     "circuit ID",
		Aliases: []string{"circuits"},
		Short:   "End a circuit on every router of its path (ids as zmesh fabric list circuits shows them)",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, pos []string) error {
			c, err := f.client()
			if err != nil {
				return err
			}
			if _, err := c.Do(cmd.Context(), "DELETE", fabricBase+"/circuits/"+url.PathEscape(pos[0]), nil, nil); err != nil {
				if apiclient.CodeOf(err) == "NOT_FOUND" {
					return fmt.Errorf("no circuit %s: it ended already, or the id is not one zmesh fabric list circuits shows", pos[0])
				}
				return err
			}
			if f.output == "json" {
				return printJSON(cmd, map[string]string{"id": pos[0]})
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "ended circuit %s\n", pos[0])
			return err
		},
	})
	return del
}

// typeVerb is a verb whose subcommands are the entity types it applies to (allowed); alone or
// with another word it names the allowed types.
func typeVerb(verb, short, allowed string) *cobra.Command {
	return &cobra.Command{
		Use:   verb + " TYPE",
		Short: short,
		Long:  short + ".\nTYPE: " + allowed,
		Args:  cobra.ArbitraryArgs,
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("fabric %s needs an entity type; allowed: %s", verb, allowed)
			}
			return usagef("%q is not an entity type of fabric %s; allowed: %s", args[0], verb, allowed)
		},
	}
}

// deriveRouter adds listeners: the router's link listener addresses.
func deriveRouter(it map[string]any, _ time.Time) {
	ls, _ := it["listenerAddresses"].([]any)
	addrs := make([]string, 0, len(ls))
	for _, l := range ls {
		if m, ok := l.(map[string]any); ok {
			addrs = append(addrs, display(m["address"]))
		}
	}
	it["listeners"] = strings.Join(addrs, ",")
}

// deriveLink adds latency: the link's round trip, from nanoseconds.
func deriveLink(it map[string]any, _ time.Time) {
	if ns, ok := it["sourceLatency"].(float64); ok {
		it["latency"] = time.Duration(ns).Round(10 * time.Microsecond).String()
	}
}

// deriveCircuit adds age (since createdAt) and pathText: the routers, ingress first, with the
// link between each two, as r/A -> l/LINK -> r/B.
func deriveCircuit(it map[string]any, now time.Time) {
	if s, ok := it["createdAt"].(string); ok {
		if created, err := time.Parse(time.RFC3339Nano, s); err == nil {
			it["age"] = now.Sub(created).Round(time.Second).String()
		}
	}
	path, _ := it["path"].(map[string]any)
	nodes, _ := path["nodes"].([]any)
	hops, _ := path["links"].([]any)
	var b strings.Builder
	for i, n := range nodes {
		if i > 0 {
			link := ""
			if i-1 < len(hops) {
				link = display(lookup(map[string]any{"l": hops[i-1]}, "l.id"))
			}
			if link == "" {
				link = "?"
			}
			b.WriteString(" -> l/" + link + " -> ")
		}
		name := display(lookup(map[string]any{"n": n}, "n.name"))
		if name == "" {
			name = display(lookup(map[string]any{"n": n}, "n.id"))
		}
		b.WriteString("r/" + name)
	}
	it["pathText"] = b.String()
}
