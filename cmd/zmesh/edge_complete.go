package main

import (
	"context"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/zmesh/zmesh/internal/apiclient"
)

// completionTimeout bounds the controller query of a shell completion: a shell waits for it.
const completionTimeout = 3 * time.Second

// completeNames completes the NAME|ID argument of a command with the names of the entities
// of collection coll that start with what is typed (ids, for types without names), as the
// controller of the login in use lists them. Any failure completes nothing, silently: the
// shell shows no error and offers no file names.
func (f *edgeFlags) completeNames(coll string) func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	return func(cmd *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx := cmd.Context()
		if ctx == nil {
			ctx = context.Background()
		}
		return f.names(ctx, coll, prefix), cobra.ShellCompDirectiveNoFileComp
	}
}

// names lists the names (or ids) of entities of coll starting with prefix, nil on failure.
func (f *edgeFlags) names(ctx context.Context, coll, prefix string) []string {
	c, err := f.client()
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, completionTimeout)
	defer cancel()
	key := "name"
	if t := f.typeOf(coll); t != nil && t.unnamed {
		key = "id"
	}
	q := url.Values{"filter": {key + " startswith " + filterQuote(prefix) + " sort by " + key + " limit 100"}}
	var items []map[string]any
	if _, err := c.Do(ctx, "GET", apiclient.ManagementAPI+"/"+coll+"?"+q.Encode(), nil, &items); err != nil {
		return nil
	}
	var out []string
	for _, it := range items {
		if s, ok := it[key].(string); ok && strings.HasPrefix(s, prefix) {
			out = append(out, s)
		}
	}
	return out
}
