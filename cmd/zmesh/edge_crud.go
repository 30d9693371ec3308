package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/zmesh/zmesh/internal/apiclient"
)

// The create, list, get, update and delete commands of every entity type, built from the
// table in edge_types.go.

// edgeCall is one edge command at work: its flags, its command and a logged-in client.
type edgeCall struct {
	f   *edgeFlags
	cmd *cobra.Command
	c   *apiclient.Client
}

func (f *edgeFlags) call(cmd *cobra.Command) (*edgeCall, error) {
	c, err := f.client()
	if err != nil {
		return nil, err
	}
	return &edgeCall{f: f, cmd: cmd, c: c}, nil
}

// do calls the management API at path (below its base).
func (e *edgeCall) do(method, path string, body, out any) (*apiclient.Pagination, error) {
	return e.c.Do(e.cmd.Context(), method, apiclient.ManagementAPI+path, body, out)
}

func (e *edgeCall) detail(t *entityType, id string) (map[string]any, error) {
	var d map[string]any
	_, err := e.do("GET", "/"+t.plural+"/"+url.PathEscape(id), nil, &d)
	return d, err
}

// typeOf is the type of a collection, nil for one that is not in the table.
func (f *edgeFlags) typeOf(coll string) *entityType {
	for _, t := range f.types {
		if t.plural == coll {
			return t
		}
	}
	return nil
}

// what names the entities of a collection in messages.
func (f *edgeFlags) what(coll string) (one, many string) {
	if t := f.typeOf(coll); t != nil {
		return t.what, t.plural
	}
	return coll, coll
}

// resolve returns the id of the entity of collection coll whose id or name is nameOrID
// (whose id it is, for types whose entities have no name).
func (e *edgeCall) resolve(coll, nameOrID string) (string, error) {
	var items []struct {
		ID string `json:"id"`
	}
	unnamed := false
	if t := e.f.typeOf(coll); t != nil {
		unnamed = t.unnamed
	}
	filter := "id = " + filterQuote(nameOrID)
	if !unnamed {
		filter += " or name = " + filterQuote(nameOrID)
	}
	q := url.Values{"filter": {filter}}
	if _, err := e.do("GET", "/"+coll+"?"+q.Encode(), nil, &items); err != nil {
		return "", err
	}
	one, many := e.f.what(coll)
	switch len(items) {
	case 0:
		if unnamed {
			return "", fmt.Errorf("no %s has id %q", one, nameOrID)
		}
		return "", fmt.Errorf("no %s is named or has id %q", one, nameOrID)
	case 1:
		return items[0].ID, nil
	}
	for _, it := range items {
		if it.ID == nameOrID {
			return it.ID, nil
		}
	}
	return "", fmt.Errorf("%d %s are named %q; give the id", len(items), many, nameOrID)
}

// filterQuote writes s as a string of the list-filter language.
func filterQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// typeNames lists the CLI names of the types verb applies to, singular or plural.
func (f *edgeFlags) typeNames(verb string, plural bool) string {
	names := make([]string, 0, len(f.types))
	for _, t := range f.types {
		if !t.serves(verb) {
			continue
		}
		if plural {
			names = append(names, t.plural)
		} else {
			names = append(names, t.name)
		}
	}
	return strings.Join(names, ", ")
}

// verbCommand is the parent of a verb's per-type commands. Run on its own it was given no
// type or one it does not know.
func (f *edgeFlags) verbCommand(verb, short string, plural bool) *cobra.Command {
	allowed := f.typeNames(verb, plural)
	return &cobra.Command{
		Use:   verb + " TYPE",
		Short: short,
		Long:  short + ".\nTYPE: " + allowed,
		Args:  cobra.ArbitraryArgs,
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("%s needs an entity type; allowed: %s", verb, allowed)
			}
			return usagef("%q is not an entity type; allowed: %s", args[0], allowed)
		},
	}
}

// variantCommand is the parent of the per-variant commands of a type (posture checks).
func variantCommand(t *entityType, verb string, sub func(*variant) *cobra.Command) *cobra.Command {
	names := make([]string, len(t.variants))
	for i := range t.variants {
		names[i] = t.variants[i].name
	}
	allowed := strings.Join(names, ", ")
	cmd := &cobra.Command{
		Use:     t.name + " KIND",
		Aliases: append([]string{t.plural}, t.aliases...),
		Short:   strings.ToUpper(verb[:1]) + verb[1:] + " " + t.short + "; KIND: " + allowed,
		Args:    cobra.ArbitraryArgs,
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("%s %s needs the kind of %s; allowed: %s", verb, t.name, t.what, allowed)
			}
			return usagef("%q is not a kind of %s; allowed: %s", args[0], t.what, allowed)
		},
	}
	for i := range t.variants {
		cmd.AddCommand(sub(&t.variants[i]))
	}
	return cmd
}

// perType adds to verb one command per type, or per variant for types that have them.
func perType(verb *cobra.Command, types []*entityType, withVariants bool, build func(*entityType, *variant) *cobra.Command) {
	for _, t := range types {
		if !t.serves(verb.Name()) {
			continue
		}
		if withVariants && len(t.variants) > 0 {
			verb.AddCommand(variantCommand(t, verb.Name(), func(v *variant) *cobra.Command { return build(t, v) }))
			continue
		}
		verb.AddCommand(build(t, nil))
	}
}

// argCount checks the number of positional arguments, showing the usage when it is wrong.
func argCount(min, max int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < min || len(args) > max {
			return fmt.Errorf("wrong number of arguments (%d); usage: %s", len(args), cmd.UseLine())
		}
		return nil
	}
}

// fieldsFor returns the flags of a type (and variant) for create or update. Update offers
// --name and none of the fields that only create sets.
func (t *entityType) fieldsFor(v *variant, create bool) []field {
	var out []field
	if !create && !t.unnamed {
		out = append(out, field{flag: "name", kind: textValue, body: "name", usage: "new name"})
	}
	all := t.fields
	if v != nil {
		all = append(slices.Clone(t.fields), v.fields...)
	}
	for _, fd := range all {
		if create || !fd.createOnly {
			out = append(out, fd)
		}
	}
	return append(out, field{flag: "tags-json", kind: jsonValue, body: "tags", usage: `tags, a JSON object such as {"team":"ops"}`})
}

// addFlags registers the flags of fields on cmd.
func addFlags(cmd *cobra.Command, fields []field, create bool) {
	fs := cmd.Flags()
	aliases := map[string]string{}
	for _, fd := range fields {
		usage := fd.usage
		if create && fd.def != "" {
			usage += " (default " + fd.def + ")"
		}
		switch fd.kind {
		case boolValue:
			fs.BoolP(fd.flag, fd.short, false, usage)
		case listValue, refsValue, rolesValue, osValue:
			fs.StringSliceP(fd.flag, fd.short, nil, usage)
		default:
			fs.StringP(fd.flag, fd.short, "", usage)
		}
		for _, a := range fd.aliases {
			aliases[a] = fd.flag
		}
	}
	if len(aliases) > 0 {
		fs.SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
			if to, ok := aliases[name]; ok {
				return pflag.NormalizedName(to)
			}
			return pflag.NormalizedName(name)
		})
	}
}

// body builds a request body from the flags given and, on create (current nil), the
// defaults. On update, current is the entity as it is: a nested object starts as its current
// value, so that changing one of its fields keeps the others.
func (e *edgeCall) body(fs *pflag.FlagSet, fields []field, exclusive [][]string, args []argument, current map[string]any) (map[string]any, error) {
	create := current == nil
	partners := map[string][]string{}
	for _, group := range exclusive {
		var given []string
		for _, name := range group {
			if fs.Changed(name) {
				given = append(given, "--"+name)
			}
			for _, other := range group {
				if other != name {
					partners[name] = append(partners[name], other)
				}
			}
		}
		if len(given) > 1 {
			return nil, usagef("%s cannot be used together; give one", strings.Join(given, " and "))
		}
	}
	for _, fd := range fields {
		if fd.implies != "" && fs.Changed(fd.flag) && !slices.ContainsFunc(fd.needs, fs.Changed) {
			if err := fs.Set(fd.implies, "true"); err != nil {
				return nil, fmt.Errorf("--%s: %w", fd.implies, err)
			}
		}
	}
	body := map[string]any{}
	for _, fd := range fields {
		given := fs.Changed(fd.flag)
		if given && len(fd.needs) > 0 && !slices.ContainsFunc(fd.needs, fs.Changed) {
			return nil, usagef("--%s needs one of --%s", fd.flag, strings.Join(fd.needs, ", --"))
		}
		if !given && create && fd.required && !slices.ContainsFunc(partners[fd.flag], fs.Changed) {
			return nil, missing(fd, args, partners[fd.flag])
		}
		if fd.body == "" || (!given && (!create || fd.def == "")) {
			continue
		}
		v, err := e.value(fs, fd, !given)
		if err != nil {
			return nil, err
		}
		setPath(body, current, fd.body, v)
	}
	return body, nil
}

func missing(fd field, args []argument, partners []string) error {
	var ways []string
	for _, a := range args {
		if a.flag == fd.flag {
			ways = append(ways, "argument "+a.name)
		}
	}
	ways = append(ways, "--"+fd.flag)
	for _, p := range partners {
		ways = append(ways, "--"+p)
	}
	return usagef("missing %s", strings.Join(ways, " or "))
}

// setPath sets the dotted path in body to v, starting nested objects from current.
func setPath(body, current map[string]any, path string, v any) {
	keys := strings.Split(path, ".")
	m := body
	for _, k := range keys[:len(keys)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			if cur, ok := current[k].(map[string]any); ok {
				next = maps.Clone(cur)
			}
			m[k] = next
		}
		m = next
		current, _ = current[k].(map[string]any)
	}
	m[keys[len(keys)-1]] = v
}

// value converts the text of a flag (or its default) to the value of its body field.
func (e *edgeCall) value(fs *pflag.FlagSet, fd field, useDefault bool) (any, error) {
	name := "--" + fd.flag
	switch fd.kind {
	case boolValue:
		if useDefault {
			return strconv.ParseBool(fd.def)
		}
		return fs.GetBool(fd.flag)
	case listValue, refsValue, rolesValue, osValue:
		list, err := fs.GetStringSlice(fd.flag)
		if err != nil {
			return nil, err
		}
		return e.listValue(fd, list)
	}
	text := fd.def
	if !useDefault {
		var err error
		if text, err = fs.GetString(fd.flag); err != nil {
			return nil, err
		}
	}
	switch fd.kind {
	case choiceValue:
		for _, c := range fd.choices {
			if strings.EqualFold(c, text) {
				return c, nil
			}
		}
		return nil, usagef("%s %q is not allowed; allowed: %s", name, text, strings.Join(fd.choices, ", "))
	case onOffValue:
		switch strings.ToLower(text) {
		case "on", "true":
			return true, nil
		case "off", "false":
			return false, nil
		}
		return nil, usagef("%s %q is not allowed; allowed: on, off", name, text)
	case intValue:
		n, err := strconv.Atoi(text)
		if err != nil {
			return nil, usagef("%s %q is not a whole number", name, text)
		}
		if n < fd.min || n > fd.max {
			return nil, usagef("%s %d is out of range; allowed: %d to %d", name, n, fd.min, fd.max)
		}
		return n, nil
	case durationValue:
		d, err := time.ParseDuration(text)
		if err != nil || d < 0 {
			return nil, usagef("%s %q is not a duration such as 90s or 30m", name, text)
		}
		return d.Milliseconds(), nil
	case refValue:
		id, err := e.resolve(fd.ref, text)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return id, nil
	case jsonValue:
		return jsonObject(name, []byte(text))
	case jsonFileValue:
		data, err := os.ReadFile(text)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return jsonObject(name+" "+text, data)
	case textFileValue:
		data, err := os.ReadFile(text)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return string(data), nil
	}
	return text, nil
}

// listValue converts the entries of a comma-separated flag.
func (e *edgeCall) listValue(fd field, list []string) (any, error) {
	name := "--" + fd.flag
	out := make([]any, 0, len(list))
	for _, s := range list {
		s = strings.TrimSpace(s)
		switch fd.kind {
		case refsValue:
			id, err := e.resolve(fd.ref, s)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			out = append(out, id)
		case rolesValue:
			switch {
			case len(s) > 1 && s[0] == '#':
				out = append(out, s)
			case len(s) > 1 && s[0] == '@':
				id, err := e.resolve(fd.ref, s[1:])
				if err != nil {
					return nil, fmt.Errorf("%s: %w", name, err)
				}
				out = append(out, "@"+id)
			default:
				return nil, fmt.Errorf("%s %q is not a role; write #attribute, #all or @name-or-id", name, s)
			}
		case osValue:
			parts := strings.Split(s, ":")
			i := slices.IndexFunc(osTypes, func(t string) bool { return strings.EqualFold(t, strings.TrimSpace(parts[0])) })
			if i < 0 {
				return nil, fmt.Errorf("%s %q: %q is not an operating system; allowed: %s", name, s, parts[0], strings.Join(osTypes, ", "))
			}
			versions := []string{}
			for _, v := range parts[1:] {
				if v = strings.TrimSpace(v); v != "" {
					versions = append(versions, v)
				}
			}
			out = append(out, map[string]any{"type": osTypes[i], "versions": versions})
		default:
			out = append(out, s)
		}
	}
	return out, nil
}

func jsonObject(what string, data []byte) (map[string]any, error) {
	var obj map[string]any
	if err := json.Unmarshal(data, &obj); err != nil || obj == nil {
		if err == nil {
			err = fmt.Errorf("it is null")
		}
		return nil, fmt.Errorf("%s is not a JSON object: %w", what, err)
	}
	return obj, nil
}

// newEdgeCreateCommand builds `edge create TYPE NAME ...`.
func newEdgeCreateCommand(f *edgeFlags) *cobra.Command {
	verb := f.verbCommand("create", "Create an entity", false)
	perType(verb, f.types, true, func(t *entityType, v *variant) *cobra.Command {
		args, name, short, aliases := t.args, t.name, "Create "+t.short, append([]string{t.plural}, t.aliases...)
		if v != nil {
			args, name, short, aliases = v.args, v.name, "Create "+an(t.what)+": "+v.short, nil
		}
		fields := t.fieldsFor(v, true)
		use, first := name+" NAME", 1 // first: the index of the first argument after NAME
		if t.unnamed {
			use, first = name, 0
		}
		for _, a := range args {
			use += " [" + a.name + "]"
		}
		cmd := &cobra.Command{
			Use: use, Short: short, Aliases: aliases,
			Args: argCount(first, first+len(args)),
			RunE: func(cmd *cobra.Command, pos []string) error {
				fs := cmd.Flags()
				for i, text := range pos[first:] {
					a := args[i]
					if fs.Changed(a.flag) {
						return usagef("argument %s and --%s are both given; give one", a.name, a.flag)
					}
					if err := fs.Set(a.flag, text); err != nil {
						return fmt.Errorf("argument %s: %w", a.name, err)
					}
				}
				e, err := f.call(cmd)
				if err != nil {
					return err
				}
				body, err := e.body(fs, fields, t.exclusive, args, nil)
				if err != nil {
					return err
				}
				entityName := ""
				if !t.unnamed {
					entityName = pos[0]
					body["name"] = entityName
				}
				if v != nil {
					body[t.discriminator] = v.value
				}
				var created struct {
					ID string `json:"id"`
				}
				if _, err := e.do("POST", "/"+t.plural, body, &created); err != nil {
					return err
				}
				detail, err := e.detail(t, created.ID)
				if err != nil {
					return fmt.Errorf("%s, but reading it back failed: %w", done("created", t, entityName, created.ID), err)
				}
				return e.created(t, fs, entityName, created.ID, detail)
			},
		}
		addFlags(cmd, fields, true)
		return cmd
	})
	return verb
}

// created reports a new entity and hands out its enrollment token when it has one.
func (e *edgeCall) created(t *entityType, fs *pflag.FlagSet, name, id string, detail map[string]any) error {
	file, _ := fs.GetString("jwt-output-file")
	return e.handOut(done("created", t, name, id), t.enrollment, file, detail)
}

// done is the line that reports what a command did to an entity: "created service web
// (ID)", or "created terminator ID" for an entity without a name.
func done(verb string, t *entityType, name, id string) string {
	if t.unnamed || name == "" {
		return verb + " " + t.what + " " + id
	}
	return fmt.Sprintf("%s %s %s (%s)", verb, t.what, name, id)
}

// handOut reports msg and, when en is set, the enrollment token en finds in detail: alone on
// stdout with text output, or in file when one is given; with -o json it prints detail.
func (e *edgeCall) handOut(msg string, en *enrollment, file string, detail map[string]any) error {
	if en != nil {
		toStdout := file == "" && en.toStdout && e.f.output == "text"
		if file != "" || toStdout {
			token := en.jwt(detail)
			if token == "" {
				return fmt.Errorf("%s, but the controller returned no enrollment token for it", msg)
			}
			if toStdout {
				// The token alone on stdout, so that it can be redirected to a file.
				fmt.Fprintln(e.cmd.ErrOrStderr(), msg+"; its enrollment token follows")
				_, err := fmt.Fprintln(e.cmd.OutOrStdout(), token)
				return err
			}
			if err := writeFileInDir(file, []byte(token), 0o600); err != nil {
				return fmt.Errorf("%s, but writing its enrollment token failed: %w", msg, err)
			}
			msg += "\nenrollment token written to " + file
		}
	}
	if e.f.output == "json" {
		return printJSON(e.cmd, detail)
	}
	_, err := fmt.Fprintln(e.cmd.OutOrStdout(), msg)
	return err
}

// newEdgeListCommand builds `edge list TYPES [FILTER]`.
func newEdgeListCommand(f *edgeFlags) *cobra.Command {
	verb := f.verbCommand("list", "List entities, optionally those a filter selects", true)
	perType(verb, f.types, false, func(t *entityType, _ *variant) *cobra.Command {
		var filterFlag string
		cmd := &cobra.Command{
			Use:     t.plural + " [FILTER]",
			Aliases: append([]string{t.name}, t.aliases...),
			Short:   "List " + t.plural + `; FILTER e.g. 'name contains "web" sort by name limit 50'`,
			Args:    argCount(0, 1),
			RunE: func(cmd *cobra.Command, pos []string) error {
				filter, err := filterOf(filterFlag, pos)
				if err != nil {
					return err
				}
				e, err := f.call(cmd)
				if err != nil {
					return err
				}
				path := "/" + t.plural
				if filter != "" {
					path += "?" + url.Values{"filter": {filter}}.Encode()
				}
				var items []map[string]any
				page, err := e.do("GET", path, nil, &items)
				if err != nil {
					return err
				}
				if f.output == "json" {
					return printJSON(cmd, listAnswer(items, page))
				}
				return printTable(cmd.OutOrStdout(), cmd.ErrOrStderr(), t.columns, items, page)
			},
		}
		cmd.Flags().StringVar(&filterFlag, "filter", "", "the filter, as an alternative to the argument")
		return cmd
	})
	return verb
}

// newEdgeGetCommand builds `edge get TYPE NAME|ID`.
func newEdgeGetCommand(f *edgeFlags) *cobra.Command {
	return f.byNameCommand("get", "Show an entity", "Show ", func(cmd *cobra.Command, e *edgeCall, t *entityType, _, id string) error {
		detail, err := e.detail(t, id)
		if err != nil {
			return err
		}
		if f.output == "json" {
			return printJSON(cmd, detail)
		}
		return printDetail(cmd.OutOrStdout(), detail)
	})
}

// byNameCommand builds a verb whose per-type commands take one NAME|ID argument, resolved to
// the entity's id before run is called.
func (f *edgeFlags) byNameCommand(verbName, verbShort, short string, run func(cmd *cobra.Command, e *edgeCall, t *entityType, name, id string) error) *cobra.Command {
	verb := f.verbCommand(verbName, verbShort, false)
	perType(verb, f.types, false, func(t *entityType, _ *variant) *cobra.Command {
		return &cobra.Command{
			Use:               t.name + " " + t.argName(),
			Aliases:           append([]string{t.plural}, t.aliases...),
			Short:             short + an(t.what),
			Args:              argCount(1, 1),
			ValidArgsFunction: f.completeNames(t.plural),
			RunE: func(cmd *cobra.Command, pos []string) error {
				e, err := f.call(cmd)
				if err != nil {
					return err
				}
				id, err := e.resolve(t.plural, pos[0])
				if err != nil {
					return err
				}
				return run(cmd, e, t, pos[0], id)
			},
		}
	})
	return verb
}

// newEdgeUpdateCommand builds `edge update TYPE NAME|ID [flags]`: it changes the fields of
// the flags given and no others.
func newEdgeUpdateCommand(f *edgeFlags) *cobra.Command {
	verb := f.verbCommand("update", "Change some fields of an entity", false)
	perType(verb, f.types, true, func(t *entityType, v *variant) *cobra.Command {
		name, short, aliases := t.name, "Change some fields of "+an(t.what), append([]string{t.plural}, t.aliases...)
		if v != nil {
			name, short, aliases = v.name, "Change some fields of "+an(t.what)+" of kind "+v.value, nil
		}
		fields := t.fieldsFor(v, false)
		cmd := &cobra.Command{
			Use: name + " " + t.argName(), Short: short, Aliases: aliases,
			Args:              argCount(1, 1),
			ValidArgsFunction: f.completeNames(t.plural),
			RunE: func(cmd *cobra.Command, pos []string) error {
				e, err := f.call(cmd)
				if err != nil {
					return err
				}
				id, err := e.resolve(t.plural, pos[0])
				if err != nil {
					return err
				}
				current, err := e.detail(t, id)
				if err != nil {
					return err
				}
				if v != nil {
					if got, _ := current[t.discriminator].(string); got != v.value {
						return fmt.Errorf("%s %s is of kind %s, not %s; use update %s %s", t.what, pos[0], got, v.value, t.name, variantName(t, got))
					}
				}
				body, err := e.body(cmd.Flags(), fields, t.exclusive, nil, current)
				if err != nil {
					return err
				}
				if len(body) == 0 {
					names := make([]string, len(fields))
					for i, fd := range fields {
						names[i] = "--" + fd.flag
					}
					return fmt.Errorf("nothing to change: give one or more of %s", strings.Join(names, ", "))
				}
				if v != nil {
					body[t.discriminator] = v.value
				}
				if _, err := e.do("PATCH", "/"+t.plural+"/"+url.PathEscape(id), body, nil); err != nil {
					return err
				}
				detail, err := e.detail(t, id)
				if err != nil {
					return err
				}
				if f.output == "json" {
					return printJSON(cmd, detail)
				}
				name, _ := detail["name"].(string)
				_, err = fmt.Fprintln(cmd.OutOrStdout(), done("updated", t, name, id))
				return err
			},
		}
		addFlags(cmd, fields, false)
		return cmd
	})
	return verb
}

// argName is how commands name the argument that finds an entity of the type.
func (t *entityType) argName() string {
	if t.unnamed {
		return "ID"
	}
	return "NAME|ID"
}

// variantName is the CLI name of the variant whose discriminator value is value.
func variantName(t *entityType, value string) string {
	for _, v := range t.variants {
		if v.value == value {
			return v.name
		}
	}
	return strings.ToLower(value)
}

// newEdgeDeleteCommand builds `edge delete TYPE NAME|ID`.
func newEdgeDeleteCommand(f *edgeFlags) *cobra.Command {
	return f.byNameCommand("delete", "Delete an entity", "Delete ", func(cmd *cobra.Command, e *edgeCall, t *entityType, name, id string) error {
		if _, err := e.do("DELETE", "/"+t.plural+"/"+url.PathEscape(id), nil, nil); err != nil {
			return err
		}
		if f.output == "json" {
			return printJSON(cmd, map[string]string{"id": id})
		}
		_, err := fmt.Fprintln(cmd.OutOrStdout(), done("deleted", t, name, id))
		return err
	})
}

// printTable writes a list as a table of the type's columns, and how many of how many it
// shows to footer (standard error), so that standard output holds the table alone.
func printTable(w, footer io.Writer, columns []column, items []map[string]any, page *apiclient.Pagination) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	headers := make([]string, len(columns))
	for i, c := range columns {
		headers[i] = c.header
	}
	fmt.Fprintln(tw, strings.Join(headers, "\t"))
	for _, it := range items {
		cells := make([]string, len(columns))
		for i, c := range columns {
			cells[i] = display(lookup(it, c.path))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if page != nil {
		_, err := fmt.Fprintf(footer, "(%d of %d shown)\n", len(items), page.TotalCount)
		return err
	}
	return nil
}

// listAnswer is a list as `-o json` prints it: the API's envelope, with the page it holds.
func listAnswer(items []map[string]any, page *apiclient.Pagination) any {
	if items == nil {
		items = []map[string]any{}
	}
	type meta struct {
		Pagination *apiclient.Pagination `json:"pagination,omitempty"`
	}
	return struct {
		Data []map[string]any `json:"data"`
		Meta meta             `json:"meta"`
	}{items, meta{page}}
}

// printDetail writes an entity as one field per line: id and name first, then the others by
// name, leaving out links and the display forms of roles.
func printDetail(w io.Writer, d map[string]any) error {
	keys := make([]string, 0, len(d))
	for k := range d {
		if k != "id" && k != "name" && k != "_links" && !strings.HasSuffix(k, "Display") {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, k := range append([]string{"id", "name"}, keys...) {
		// Lines after the first of a value (a PEM) go in the value column too.
		fmt.Fprintf(tw, "%s\t%s\n", k, strings.ReplaceAll(strings.TrimRight(display(d[k]), "\n"), "\n", "\n\t"))
	}
	return tw.Flush()
}

// an puts the indefinite article before a noun phrase.
func an(s string) string {
	if s != "" && strings.ContainsRune("aeiouAEIOU", rune(s[0])) {
		return "an " + s
	}
	return "a " + s
}

// lookup follows a dotted path through nested objects.
func lookup(m map[string]any, path string) any {
	var v any = m
	for _, k := range strings.Split(path, ".") {
		obj, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = obj[k]
	}
	return v
}

// display renders a JSON value for a table cell: texts as they are, lists of texts joined
// with commas, other lists and objects as compact JSON.
func display(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case bool:
		return strconv.FormatBool(x)
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case map[string]any:
		// A reference to another entity.
		if id, ok := x["id"].(string); ok && x["entity"] != nil {
			return fmt.Sprintf("%v (%s)", x["name"], id)
		}
	case []any:
		texts := make([]string, 0, len(x))
		for _, it := range x {
			s, ok := it.(string)
			if !ok {
				texts = nil
				break
			}
			texts = append(texts, s)
		}
		if texts != nil {
			return strings.Join(texts, ",")
		}
	}
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(data)
}

// filterOf is a list command's filter: the argument, or --filter, not both.
func filterOf(flag string, args []string) (string, error) {
	if len(args) == 0 {
		return flag, nil
	}
	if flag != "" {
		return "", usagef("the filter is given twice, as argument and with --filter; give one")
	}
	return args[0], nil
}
