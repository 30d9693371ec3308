package config

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"
)

// maxFileSize bounds what the loaders read: a configuration file is a few kilobytes, and a
// bound keeps a wrong path (a log, a device) from being read whole.
const maxFileSize = 1 << 20

// maxAliasDepth bounds alias chains, so that a file cannot make the reader loop.
const maxAliasDepth = 32

// reader walks a parsed YAML document against a schema spelled out in code by the loaders.
// It records every problem it meets instead of stopping at the first, and it substitutes
// environment variables in scalar values as it reads them.
type reader struct {
	file      string
	lookupEnv func(string) (string, bool)
	errs      []Diagnostic
	warns     []Diagnostic
}

func (r *reader) errorf(line int, path, format string, args ...any) {
	r.errs = append(r.errs, Diagnostic{File: r.file, Line: line, Path: path, Message: fmt.Sprintf(format, args...)})
}

// unknownf records an unknown key: an error for validate, a warning for run (see Strict).
func (r *reader) unknownf(line int, path, format string, args ...any) {
	r.warns = append(r.warns, Diagnostic{File: r.file, Line: line, Path: path, Message: fmt.Sprintf(format, args...), UnknownKey: true})
}

func (r *reader) warnf(line int, path, format string, args ...any) {
	r.warns = append(r.warns, Diagnostic{File: r.file, Line: line, Path: path, Message: fmt.Sprintf(format, args...)})
}

// parseDocument parses data as a single YAML document and returns its root mapping node, or
// nil after recording why it could not.
func (r *reader) parseDocument(data []byte) *yaml.Node {
	if len(data) > maxFileSize {
		r.errorf(0, "", "file is %d bytes, larger than the %d bytes a configuration file may have", len(data), maxFileSize)
		return nil
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		r.yamlError(err)
		return nil
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		r.errorf(0, "", "file is empty; a configuration is a YAML mapping of sections")
		return nil
	}
	root := resolve(doc.Content[0])
	if root == nil || root.Kind != yaml.MappingNode {
		r.errorf(doc.Content[0].Line, "", "the top level must be a mapping of sections, found %s", kindName(doc.Content[0]))
		return nil
	}
	return root
}

var yamlLineRE = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)

// yamlError turns a syntax error of the YAML library into diagnostics with line numbers.
func (r *reader) yamlError(err error) {
	var te *yaml.TypeError
	msgs := []string{err.Error()}
	if errors.As(err, &te) {
		msgs = te.Errors
	}
	for _, msg := range msgs {
		line := 0
		if m := yamlLineRE.FindStringSubmatch(msg); m != nil {
			line, _ = strconv.Atoi(m[1])
			msg = m[2]
		}
		msg = strings.TrimPrefix(msg, "yaml: ")
		r.errorf(line, "", "invalid YAML: %s", msg)
	}
}

// resolve follows aliases to the node they name.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode; i++ {
		if i == maxAliasDepth {
			return nil
		}
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	n = resolve(n)
	return n == nil || (n.Kind == yaml.ScalarNode && n.Tag == "!!null")
}

func kindName(n *yaml.Node) string {
	n = resolve(n)
	if n == nil {
		return "nothing"
	}
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "null"
		}
		return fmt.Sprintf("the value %q", n.Value)
	}
	return "an unsupported node"
}

// join builds a key path: join("link", "dialers") is "link.dialers".
func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func index(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

// A mapping is a YAML mapping being read. It remembers which keys the schema asked for, so
// that finish can report the others.
type mapping struct {
	r     *reader
	path  string
	line  int
	order []string
	vals  map[string]*yaml.Node
	keyAt map[string]int
	used  map[string]bool

	known    []string          // the keys the schema asked about, in the order it asked
	required map[string]bool   // keys the schema requires
	sections map[string]bool   // keys opened as a mapping
	absent   map[string]string // what the absence of a key means, said when a typo stands in its place
	free     bool              // an options map: it may hold options of other components
}

// mapping opens n as a mapping at path. A nil or null n is an empty mapping; any other kind
// is recorded as an error and read as empty. line is where the mapping's key stands, used for
// errors about keys that are missing.
func (r *reader) mapping(n *yaml.Node, path string, line int) *mapping {
	m := &mapping{r: r, path: path, line: line, vals: map[string]*yaml.Node{}, keyAt: map[string]int{}, used: map[string]bool{},
		required: map[string]bool{}, sections: map[string]bool{}, absent: map[string]string{}}
	if isNull(n) {
		return m
	}
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		r.errorf(n.Line, path, "must be a mapping of keys, found %s", kindName(n))
		return m
	}
	m.line = n.Line
	m.add(n, 0)
	return m
}

// add takes the pairs of mapping node n, merging "<<" keys the way YAML merge keys work:
// keys given directly win over merged ones.
func (m *mapping) add(n *yaml.Node, depth int) {
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		if k == nil || k.Kind != yaml.ScalarNode {
			m.r.errorf(n.Content[i].Line, m.path, "keys must be plain strings, found %s", kindName(n.Content[i]))
			continue
		}
		if k.Value == "<<" && k.Tag == "!!merge" {
			merges = append(merges, v)
			continue
		}
		if first, dup := m.keyAt[k.Value]; dup {
			if depth == 0 {
				m.r.errorf(k.Line, join(m.path, k.Value), "key appears twice (first at line %d)", first)
			}
			continue
		}
		m.order = append(m.order, k.Value)
		m.vals[k.Value] = v
		m.keyAt[k.Value] = k.Line
	}
	if depth >= maxAliasDepth {
		return
	}
	for _, mv := range merges {
		mv = resolve(mv)
		switch {
		case mv != nil && mv.Kind == yaml.MappingNode:
			m.add(mv, depth+1)
		case mv != nil && mv.Kind == yaml.SequenceNode:
			for _, item := range mv.Content {
				if it := resolve(item); it != nil && it.Kind == yaml.MappingNode {
					m.add(it, depth+1)
				}
			}
		default:
			m.r.errorf(lineOf(mv, m.line), m.path, "a merge key (<<) must name a mapping, found %s", kindName(mv))
		}
	}
}

func lineOf(n *yaml.Node, fallback int) int {
	if n == nil {
		return fallback
	}
	return n.Line
}

func (m *mapping) keyPath(key string) string { return join(m.path, key) }

// know records key as one of the schema's keys at this level, for the suggestions of finish.
func (m *mapping) know(key string) {
	if !slices.Contains(m.known, key) {
		m.known = append(m.known, key)
	}
}

// has reports whether key is present, null or not.
func (m *mapping) has(key string) bool {
	m.know(key)
	_, ok := m.vals[key]
	return ok
}

// get returns the node of key and marks the key as known. It returns nil when the key is
// absent or null, which every reader takes as "use the default".
func (m *mapping) get(key string) *yaml.Node {
	m.know(key)
	m.used[key] = true
	n := m.vals[key]
	if isNull(n) {
		return nil
	}
	return n
}

// lineOfKey is where key stands, or where the mapping starts when key is absent.
func (m *mapping) lineOfKey(key string) int {
	m.know(key)
	if l, ok := m.keyAt[key]; ok {
		return l
	}
	return m.line
}

// require records an error when key is absent or null.
func (m *mapping) require(key, what string) bool {
	m.required[key] = true
	if m.get(key) == nil {
		m.r.errorf(m.lineOfKey(key), m.keyPath(key), "is required: %s", what)
		return false
	}
	return true
}

// ignore marks key as known without reading it (a key read through another path).
func (m *mapping) ignore(key string) {
	m.know(key)
	m.used[key] = true
}

// whenAbsent says what the absence of key means ("section missing, using the default listen
// address ..."). finish says it when a key that looks like a typo of key stands in its place.
func (m *mapping) whenAbsent(key, meaning string) { m.absent[key] = meaning }

// finish reports the keys nobody asked for. Each is an unknown-key diagnostic (an error for
// validate, a warning for run) that suggests the known key it is closest to, or lists the
// known keys. In an options map, which may hold options of other components, only a key
// close to one zmesh reads is reported so; the others are warnings, as before. A typo whose
// key is therefore absent is followed by a warning saying what that absence means.
func (m *mapping) finish() {
	for _, k := range m.order {
		if m.used[k] {
			continue
		}
		line, path := m.keyAt[k], m.keyPath(k)
		near := suggest(k, m.known)
		switch {
		case near != "":
			m.r.unknownf(line, path, "unknown key; did you mean %s?", near)
		case m.free:
			m.r.warnf(line, path, "unknown key, ignored")
			continue
		case len(m.known) == 0:
			m.r.unknownf(line, path, "unknown key; no keys are defined here")
		default:
			m.r.unknownf(line, path, "unknown key; allowed: %s", strings.Join(m.known, ", "))
		}
		if near == "" || m.has(near) || m.required[near] {
			continue
		}
		meaning, ok := m.absent[near]
		switch {
		case ok:
		case m.sections[near]:
			meaning = "section missing, its defaults apply"
		default:
			meaning = "not set, its default applies"
		}
		m.r.warnf(line, m.keyPath(near), "%s (%s is not read)", meaning, quoteKey(k))
	}
}

// quoteKey writes a key for a message: as it is when it is a plain word, quoted otherwise.
func quoteKey(k string) string {
	for _, c := range k {
		if !unicode.IsLetter(c) && !unicode.IsDigit(c) && c != '_' && c != '-' {
			return strconv.Quote(k)
		}
	}
	return k
}

// options opens the options map under key: it may hold options of other components.
func (m *mapping) options(key string) *mapping {
	o := m.child(key)
	o.free = true
	return o
}

// child opens the mapping under key. The key counts as present even when its value is null.
func (m *mapping) child(key string) *mapping {
	m.know(key)
	m.sections[key] = true
	m.used[key] = true
	return m.r.mapping(m.vals[key], m.keyPath(key), m.lineOfKey(key))
}

// list returns the items of the sequence under key (nil when absent or null).
func (m *mapping) list(key string) []*yaml.Node {
	n := m.get(key)
	if n == nil {
		return nil
	}
	n = resolve(n)
	if n.Kind != yaml.SequenceNode {
		m.r.errorf(n.Line, m.keyPath(key), "must be a list, found %s", kindName(n))
		return nil
	}
	return n.Content
}

// str reads a string; def when absent.
func (m *mapping) str(key, def string) string {
	n := m.get(key)
	if n == nil {
		return def
	}
	if s, ok := m.r.scalar(n, m.keyPath(key)); ok {
		return s
	}
	return def
}

// strList reads a list of non-empty strings. A single string is taken as a list of one, the
// short form real configurations use for groups.
func (m *mapping) strList(key string) []string {
	n := resolve(m.get(key))
	if n == nil {
		return nil
	}
	path := m.keyPath(key)
	items := []*yaml.Node{n}
	if n.Kind == yaml.SequenceNode {
		items = n.Content
	}
	out := make([]string, 0, len(items))
	for i, it := range items {
		p := path
		if n.Kind == yaml.SequenceNode {
			p = index(path, i)
		}
		s, ok := m.r.scalar(it, p)
		if !ok {
			continue
		}
		if s == "" {
			m.r.errorf(it.Line, p, "must not be empty")
			continue
		}
		out = append(out, s)
	}
	return out
}

func (m *mapping) integer(key string, def, min, max int) int {
	n := m.get(key)
	if n == nil {
		return def
	}
	if v, ok := m.r.integer(n, m.keyPath(key), min, max); ok {
		return v
	}
	return def
}

// millis reads a duration the file gives in whole milliseconds; bounds in milliseconds.
func (m *mapping) millis(key string, def, min, max int) time.Duration {
	return time.Duration(m.integer(key, def, min, max)) * time.Millisecond
}

// seconds reads a duration the file gives in whole seconds; bounds in seconds.
func (m *mapping) seconds(key string, def, min, max int) time.Duration {
	return time.Duration(m.integer(key, def, min, max)) * time.Second
}

func (m *mapping) number(key string, def, min, max float64) float64 {
	n := m.get(key)
	if n == nil {
		return def
	}
	path := m.keyPath(key)
	s, ok := m.r.scalar(n, path)
	if !ok {
		return def
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		m.r.errorf(n.Line, path, "%q is not a number", s)
		return def
	}
	if v < min {
		m.r.errorf(n.Line, path, "%s is below the minimum %s", fmtFloat(v), fmtFloat(min))
		return def
	}
	if v > max {
		m.r.errorf(n.Line, path, "%s is above the maximum %s", fmtFloat(v), fmtFloat(max))
		return def
	}
	return v
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func (m *mapping) boolean(key string, def bool) bool {
	n := m.get(key)
	if n == nil {
		return def
	}
	path := m.keyPath(key)
	s, ok := m.r.scalar(n, path)
	if !ok {
		return def
	}
	switch s {
	case "true":
		return true
	case "false":
		return false
	}
	m.r.errorf(n.Line, path, "%q is not a boolean; allowed: true, false", s)
	return def
}

// duration reads a duration written with a unit suffix.
func (m *mapping) duration(key string, def, min, max time.Duration) time.Duration {
	n := m.get(key)
	if n == nil {
		return def
	}
	path := m.keyPath(key)
	s, ok := m.r.scalar(n, path)
	if !ok {
		return def
	}
	d, err := parseDuration(s)
	if err != nil {
		m.r.errorf(n.Line, path, "%v", err)
		return def
	}
	if d < min {
		m.r.errorf(n.Line, path, "%s is below the minimum %s", s, duration(min))
		return def
	}
	if d > max {
		m.r.errorf(n.Line, path, "%s is above the maximum %s", s, duration(max))
		return def
	}
	return d
}

// oneOf reads a string that must be one of allowed; def when absent.
func (m *mapping) oneOf(key, def string, allowed ...string) string {
	n := m.get(key)
	if n == nil {
		return def
	}
	s, ok := m.r.oneOf(n, m.keyPath(key), allowed...)
	if !ok {
		return def
	}
	return s
}

func (r *reader) oneOf(n *yaml.Node, path string, allowed ...string) (string, bool) {
	s, ok := r.scalar(n, path)
	if !ok {
		return "", false
	}
	for _, a := range allowed {
		if s == a {
			return s, true
		}
	}
	r.errorf(n.Line, path, "%q is not allowed; allowed: %s", s, strings.Join(allowed, ", "))
	return "", false
}

func (r *reader) integer(n *yaml.Node, path string, min, max int) (int, bool) {
	s, ok := r.scalar(n, path)
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		if ne, isNum := err.(*strconv.NumError); isNum && ne.Err == strconv.ErrRange {
			r.errorf(n.Line, path, "%s is out of range; allowed: %d to %d", s, min, max)
		} else {
			r.errorf(n.Line, path, "%q is not a whole number", s)
		}
		return 0, false
	}
	if v < int64(min) {
		r.errorf(n.Line, path, "%d is below the minimum %d", v, min)
		return 0, false
	}
	if v > int64(max) {
		r.errorf(n.Line, path, "%d is above the maximum %d", v, max)
		return 0, false
	}
	return int(v), true
}

// scalar returns the text of a scalar node with environment variables substituted.
func (r *reader) scalar(n *yaml.Node, path string) (string, bool) {
	rn := resolve(n)
	if rn == nil || rn.Kind != yaml.ScalarNode {
		r.errorf(lineOf(n, 0), path, "must be a single value, found %s", kindName(n))
		return "", false
	}
	s, err := expandEnv(rn.Value, r.lookupEnv)
	if err != nil {
		r.errorf(n.Line, path, "%v", err)
		return "", false
	}
	return s, true
}

// expandEnv substitutes ${NAME} and $NAME with the value of the environment variable NAME;
// "$$" stands for a literal "$". A "$" not followed by a name is kept as it is. An unset
// variable is an error naming it.
func expandEnv(s string, lookup func(string) (string, bool)) (string, error) {
	if !strings.Contains(s, "$") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '$' || i+1 == len(s) {
			b.WriteByte(c)
			continue
		}
		var name string
		switch next := s[i+1]; {
		case next == '$':
			b.WriteByte('$')
			i++
			continue
		case next == '{':
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				return "", fmt.Errorf("unterminated ${ in %q", s)
			}
			name = s[i+2 : i+2+end]
			if !isEnvName(name) {
				return "", fmt.Errorf("${%s} is not a valid environment variable name (letters, digits and _, not starting with a digit)", name)
			}
			i += 2 + end
		case isEnvStart(next):
			j := i + 1
			for j < len(s) && isEnvChar(s[j]) {
				j++
			}
			name = s[i+1 : j]
			i = j - 1
		default:
			b.WriteByte(c)
			continue
		}
		v, ok := lookup(name)
		if !ok {
			return "", fmt.Errorf("environment variable %s is not set", name)
		}
		b.WriteString(v)
	}
	return b.String(), nil
}

func isEnvStart(c byte) bool { return c == '_' || (c|0x20 >= 'a' && c|0x20 <= 'z') }
func isEnvChar(c byte) bool  { return isEnvStart(c) || (c >= '0' && c <= '9') }

func isEnvName(s string) bool {
	if s == "" || !isEnvStart(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !isEnvChar(s[i]) {
			return false
		}
	}
	return true
}
