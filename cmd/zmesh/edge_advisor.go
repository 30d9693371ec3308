package main

import (
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

// The policy advisor: for pairs of an identity and a service, which policies let the identity
// dial or bind the service and reach it through edge routers, and whether it can. It only
// reads, through the policies' related-entity lists of the management API.

// entityRef is an entity as the advice names it.
type entityRef struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// routerRef is an edge router of the advice, with whether its control channel is up.
type routerRef struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	IsOnline bool   `json:"isOnline"`
}

// advice is the report on one identity and one service.
type advice struct {
	Identity                  entityRef   `json:"identity"`
	Service                   entityRef   `json:"service"`
	DialPolicies              []entityRef `json:"dialPolicies"`
	BindPolicies              []entityRef `json:"bindPolicies"`
	IdentityEdgeRouterCount   int         `json:"identityEdgeRouterCount"`
	ServiceEdgeRouterCount    int         `json:"serviceEdgeRouterCount"`
	EdgeRouterPolicies        []entityRef `json:"edgeRouterPolicies"`        // of the identity, giving it common routers
	ServiceEdgeRouterPolicies []entityRef `json:"serviceEdgeRouterPolicies"` // of the service, giving it common routers
	CommonEdgeRouters         []routerRef `json:"commonEdgeRouters"`
	Verdict                   string      `json:"verdict"` // OKAY or ERROR
	Reason                    string      `json:"reason,omitempty"`
}

// advisor computes advice, reading each related list once.
type advisor struct {
	e       *edgeCall
	related map[string][]map[string]any // by path
}

// all reads every page of the list at path (below the management API).
func (a *advisor) all(path string) ([]map[string]any, error) {
	if got, ok := a.related[path]; ok {
		return got, nil
	}
	const limit = 500 // the API's largest page
	var out []map[string]any
	for {
		var page []map[string]any
		q := url.Values{"limit": {strconv.Itoa(limit)}, "offset": {strconv.Itoa(len(out))}}
		p, err := a.e.do("GET", path+"?"+q.Encode(), nil, &page)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if p == nil || len(page) == 0 || len(out) >= p.TotalCount {
			break
		}
	}
	a.related[path] = out
	return out, nil
}

// relatedOf reads the entities of kind related that the policies relate to coll/id.
func (a *advisor) relatedOf(coll, id, related string) ([]map[string]any, error) {
	return a.all("/" + coll + "/" + url.PathEscape(id) + "/" + related)
}

func refOf(m map[string]any) entityRef {
	id, _ := m["id"].(string)
	name, _ := m["name"].(string)
	return entityRef{id, name}
}

func ids(items []map[string]any) map[string]map[string]any {
	out := make(map[string]map[string]any, len(items))
	for _, it := range items {
		if id, ok := it["id"].(string); ok {
			out[id] = it
		}
	}
	return out
}

// advise reports on identity and service.
func (a *advisor) advise(identity, service entityRef) (*advice, error) {
	ad := &advice{Identity: identity, Service: service, DialPolicies: []entityRef{}, BindPolicies: []entityRef{},
		EdgeRouterPolicies: []entityRef{}, ServiceEdgeRouterPolicies: []entityRef{}, CommonEdgeRouters: []routerRef{}}
	identityPolicies, err := a.relatedOf("identities", identity.ID, "service-policies")
	if err != nil {
		return nil, err
	}
	servicePolicies, err := a.relatedOf("services", service.ID, "service-policies")
	if err != nil {
		return nil, err
	}
	ofService := ids(servicePolicies)
	for _, p := range identityPolicies {
		if ofService[refOf(p).ID] == nil {
			continue
		}
		switch p["type"] {
		case "Dial":
			ad.DialPolicies = append(ad.DialPolicies, refOf(p))
		case "Bind":
			ad.BindPolicies = append(ad.BindPolicies, refOf(p))
		}
	}
	identityRouters, err := a.relatedOf("identities", identity.ID, "edge-routers")
	if err != nil {
		return nil, err
	}
	serviceRouters, err := a.relatedOf("services", service.ID, "edge-routers")
	if err != nil {
		return nil, err
	}
	ad.IdentityEdgeRouterCount, ad.ServiceEdgeRouterCount = len(identityRouters), len(serviceRouters)
	ofServiceRouters := ids(serviceRouters)
	common := map[string]bool{}
	online := 0
	for _, r := range identityRouters {
		if ofServiceRouters[refOf(r).ID] == nil {
			continue
		}
		on, _ := r["isOnline"].(bool)
		ref := refOf(r)
		ad.CommonEdgeRouters = append(ad.CommonEdgeRouters, routerRef{ref.ID, ref.Name, on})
		common[ref.ID] = true
		if on {
			online++
		}
	}
	if ad.EdgeRouterPolicies, err = a.givingCommon("identities", identity.ID, "edge-router-policies", common); err != nil {
		return nil, err
	}
	if ad.ServiceEdgeRouterPolicies, err = a.givingCommon("services", service.ID, "service-edge-router-policies", common); err != nil {
		return nil, err
	}
	ad.Verdict = "ERROR"
	switch {
	case len(ad.DialPolicies) == 0 && len(ad.BindPolicies) == 0:
		ad.Reason = "no service policy lets the identity dial or bind the service"
	case ad.IdentityEdgeRouterCount == 0:
		ad.Reason = "no edge router policy gives the identity an edge router"
	case ad.ServiceEdgeRouterCount == 0:
		ad.Reason = "no service edge router policy gives the service an edge router"
	case len(common) == 0:
		ad.Reason = "the identity's edge routers and the service's have none in common"
	case online == 0:
		ad.Reason = "none of their common edge routers is online"
	default:
		ad.Verdict = "OKAY"
	}
	return ad, nil
}

// givingCommon lists the policies (of kind related, of coll/id) whose edge routers include
// one of common.
func (a *advisor) givingCommon(coll, id, related string, common map[string]bool) ([]entityRef, error) {
	out := []entityRef{}
	policies, err := a.relatedOf(coll, id, related)
	if err != nil {
		return nil, err
	}
	for _, p := range policies {
		routers, err := a.relatedOf(related, refOf(p).ID, "edge-routers")
		if err != nil {
			return nil, err
		}
		if slices.ContainsFunc(routers, func(r map[string]any) bool { return common[refOf(r).ID] }) {
			out = append(out, refOf(p))
		}
	}
	return out, nil
}

// newEdgePolicyAdvisorCommand builds `edge policy-advisor identities|services`.
func newEdgePolicyAdvisorCommand(f *edgeFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy-advisor identities|services",
		Short: "Tell whether identities can use services, and which policies make it so",
		Long: "For pairs of an identity and a service: the service policies that let the identity dial or\n" +
			"bind the service, the edge router policies and service edge router policies that give\n" +
			"both common edge routers, whether those routers are online, and a verdict: OKAY, or\n" +
			"ERROR with the reason. It only reads.",
		Args: cobra.ArbitraryArgs,
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("policy-advisor needs identities or services")
			}
			return usagef("%q is not a kind policy-advisor reports on; allowed: identities, services", args[0])
		},
	}
	cmd.AddCommand(f.advisorCommand("identities", "services"), f.advisorCommand("services", "identities"))
	return cmd
}

// advisorCommand reports on the entities of coll (identities or services) and those of other
// the policies relate to them.
func (f *edgeFlags) advisorCommand(coll, other string) *cobra.Command {
	one, _ := f.what(coll)
	otherOne, _ := f.what(other)
	var quiet bool
	cmd := &cobra.Command{
		Use:     coll + " [" + strings.ToUpper(one) + " [" + strings.ToUpper(otherOne) + "]]",
		Aliases: []string{one},
		Short: "Advise on " + an(one) + " (every " + one + " without one) and the " + other + " the policies relate to it, " +
			"or the " + otherOne + " given",
		Args: argCount(0, 2),
		ValidArgsFunction: func(cmd *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
			switch len(args) {
			case 0:
				return f.completeNames(coll)(cmd, nil, prefix)
			case 1:
				return f.completeNames(other)(cmd, nil, prefix)
			}
			return nil, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, pos []string) error {
			e, err := f.call(cmd)
			if err != nil {
				return err
			}
			a := &advisor{e: e, related: map[string][]map[string]any{}}
			var firsts []entityRef
			if len(pos) > 0 {
				id, err := e.resolve(coll, pos[0])
				if err != nil {
					return err
				}
				var d map[string]any
				if _, err := e.do("GET", "/"+coll+"/"+url.PathEscape(id), nil, &d); err != nil {
					return err
				}
				firsts = append(firsts, refOf(d))
			} else {
				items, err := a.all("/" + coll)
				if err != nil {
					return err
				}
				for _, it := range items {
					firsts = append(firsts, refOf(it))
				}
			}
			var given *entityRef
			if len(pos) > 1 {
				id, err := e.resolve(other, pos[1])
				if err != nil {
					return err
				}
				var d map[string]any
				if _, err := e.do("GET", "/"+other+"/"+url.PathEscape(id), nil, &d); err != nil {
					return err
				}
				ref := refOf(d)
				given = &ref
			}
			var report []*advice
			var alone []entityRef // entities the policies relate to nothing of other
			for _, first := range firsts {
				var seconds []entityRef
				if given != nil {
					seconds = []entityRef{*given}
				} else {
					items, err := a.relatedOf(coll, first.ID, other)
					if err != nil {
						return err
					}
					for _, it := range items {
						seconds = append(seconds, refOf(it))
					}
					if len(seconds) == 0 {
						alone = append(alone, first)
					}
				}
				for _, second := range seconds {
					identity, service := first, second
					if coll == "services" {
						identity, service = second, first
					}
					ad, err := a.advise(identity, service)
					if err != nil {
						return err
					}
					if !quiet || ad.Verdict != "OKAY" {
						report = append(report, ad)
					}
				}
			}
			if f.output == "json" {
				if report == nil {
					report = []*advice{}
				}
				return printJSON(cmd, struct {
					Data []*advice `json:"data"`
					Meta struct{}  `json:"meta"`
				}{Data: report})
			}
			w := cmd.OutOrStdout()
			for _, x := range alone {
				fmt.Fprintf(w, "ERROR  %s %s: no service policy relates it to any %s\n", one, x.Name, otherOne)
			}
			for _, ad := range report {
				if err := printAdvice(w, ad); err != nil {
					return err
				}
			}
			if len(report) == 0 && len(alone) == 0 && quiet {
				_, err := fmt.Fprintln(cmd.ErrOrStderr(), "no errors")
				return err
			}
			return nil
		},
	}
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "report only the pairs whose verdict is not OKAY")
	return cmd
}

// printAdvice writes the advice on one pair as a block of lines.
func printAdvice(w io.Writer, ad *advice) error {
	head := ad.Verdict + "  " + ad.Identity.Name + " -> " + ad.Service.Name
	if ad.Reason != "" {
		head += ": " + ad.Reason
	}
	fmt.Fprintln(w, head)
	names := func(refs []entityRef) string {
		if len(refs) == 0 {
			return "-"
		}
		s := make([]string, len(refs))
		for i, r := range refs {
			s[i] = r.Name
		}
		return strings.Join(s, ", ")
	}
	routers := make([]string, len(ad.CommonEdgeRouters))
	for i, r := range ad.CommonEdgeRouters {
		state := "offline"
		if r.IsOnline {
			state = "online"
		}
		routers[i] = r.Name + " (" + state + ")"
	}
	common := "-"
	if len(routers) > 0 {
		common = strings.Join(routers, ", ")
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "  dial policies\t%s\n", names(ad.DialPolicies))
	fmt.Fprintf(tw, "  bind policies\t%s\n", names(ad.BindPolicies))
	fmt.Fprintf(tw, "  edge routers of the identity\t%d\n", ad.IdentityEdgeRouterCount)
	fmt.Fprintf(tw, "  edge routers of the service\t%d\n", ad.ServiceEdgeRouterCount)
	fmt.Fprintf(tw, "  common edge routers\t%s\n", common)
	fmt.Fprintf(tw, "  edge router policies\t%s\n", names(ad.EdgeRouterPolicies))
	fmt.Fprintf(tw, "  service edge router policies\t%s\n", names(ad.ServiceEdgeRouterPolicies))
	return tw.Flush()
}
