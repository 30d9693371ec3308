package query

import (
	"fmt"
	"strings"
	"time"
)

// Query is a parsed filter.
type Query struct {
	Expr      Node        // nil: every record matches
	Sort      []SortField // empty: input order
	Skip      *int
	Limit     *int
	LimitNone bool // limit none: no page size limit
}

// SortField is one key of a sort by clause.
type SortField struct {
	Field string
	Desc  bool
}

// Node is a node of a filter expression.
type Node interface{ node() }

// And, Or and Not combine expressions; Const is true or false.
type (
	And   struct{ Left, Right Node }
	Or    struct{ Left, Right Node }
	Not   struct{ X Node }
	Const struct{ Value bool }
)

// Set functions over list fields.
const (
	SetNone  = ""
	SetAnyOf = "anyOf"
	SetAllOf = "allOf"
)

// Compare is a comparison of a field with one value, a list (in) or two (between).
type Compare struct {
	Set    string // SetNone, SetAnyOf or SetAllOf
	Field  string
	Op     string // = != < > <= >= contains icontains startswith endswith in between null
	Negate bool   // not contains, not in, not between, is not null ...
	Values []Value
}

func (And) node()     {}
func (Or) node()      {}
func (Not) node()     {}
func (Const) node()   {}
func (Compare) node() {}

type parser struct {
	toks  []token
	i     int
	depth int
}

// Parse parses a filter. The empty filter matches every record.
func Parse(s string) (*Query, error) {
	if len(s) > MaxLength {
		return nil, &SyntaxError{MaxLength, fmt.Sprintf("the filter is longer than %d bytes", MaxLength)}
	}
	toks, err := lex(s)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks}
	q := &Query{}
	if !p.atClause() {
		if q.Expr, err = p.or(); err != nil {
			return nil, err
		}
	}
	if err := p.clauses(q); err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind != tEOF {
		return nil, p.errorf(t, "expected and, or, sort by, skip, limit or the end of the filter, found %s", t.describe())
	}
	return q, nil
}

func (p *parser) peek() token { return p.toks[p.i] }
func (p *parser) next() token { t := p.toks[p.i]; p.i++; return t }

func (p *parser) errorf(t token, format string, args ...any) error {
	return &SyntaxError{t.pos, fmt.Sprintf(format, args...)}
}

// isWord reports whether t is the keyword w (case-insensitive).
func isWord(t token, w string) bool { return t.kind == tIdent && strings.EqualFold(t.text, w) }

func (p *parser) word(w string) bool {
	if isWord(p.peek(), w) {
		p.i++
		return true
	}
	return false
}

func (p *parser) atClause() bool {
	t := p.peek()
	return t.kind == tEOF || isWord(t, "sort") || isWord(t, "skip") || isWord(t, "limit")
}

func (p *parser) enter(t token) error {
	if p.depth++; p.depth > MaxDepth {
		return p.errorf(t, "the filter nests deeper than %d levels", MaxDepth)
	}
	return nil
}

func (p *parser) or() (Node, error) {
	left, err := p.and()
	if err != nil {
		return nil, err
	}
	for p.word("or") {
		right, err := p.and()
		if err != nil {
			return nil, err
		}
		left = Or{left, right}
	}
	return left, nil
}

func (p *parser) and() (Node, error) {
	left, err := p.not()
	if err != nil {
		return nil, err
	}
	for p.word("and") {
		right, err := p.not()
		if err != nil {
			return nil, err
		}
		left = And{left, right}
	}
	return left, nil
}

func (p *parser) not() (Node, error) {
	t := p.peek()
	if isWord(t, "not") {
		p.i++
		if err := p.enter(t); err != nil {
			return nil, err
		}
		x, err := p.not()
		p.depth--
		if err != nil {
			return nil, err
		}
		return Not{x}, nil
	}
	return p.primary()
}

func (p *parser) primary() (Node, error) {
	t := p.peek()
	switch {
	case t.kind == tLParen:
		p.i++
		if err := p.enter(t); err != nil {
			return nil, err
		}
		x, err := p.or()
		p.depth--
		if err != nil {
			return nil, err
		}
		if c := p.next(); c.kind != tRParen {
			return nil, p.errorf(c, "expected ) to close the ( at offset %d, found %s", t.pos, c.describe())
		}
		return x, nil
	case isWord(t, "true") || isWord(t, "false"):
		p.i++
		return Const{isWord(t, "true")}, nil
	case t.kind == tIdent && !isKeyword(t.text):
		return p.comparison()
	}
	return nil, p.errorf(t, "expected a field name, not, ( or true/false, found %s", t.describe())
}

var keywords = []string{"and", "or", "not", "in", "between", "is", "null", "true", "false", "contains", "icontains",
	"startswith", "endswith", "sort", "by", "asc", "desc", "skip", "limit", "none"}

func isKeyword(s string) bool {
	for _, k := range keywords {
		if strings.EqualFold(s, k) {
			return true
		}
	}
	return false
}

// comparison parses field op value, with anyOf(field)/allOf(field) on the left.
func (p *parser) comparison() (Node, error) {
	t := p.next()
	c := Compare{Field: t.text}
	if (strings.EqualFold(t.text, SetAnyOf) || strings.EqualFold(t.text, SetAllOf)) && p.peek().kind == tLParen {
		c.Set = SetAnyOf
		if strings.EqualFold(t.text, SetAllOf) {
			c.Set = SetAllOf
		}
		p.i++
		f := p.next()
		if f.kind != tIdent || isKeyword(f.text) {
			return nil, p.errorf(f, "expected a field name in %s(), found %s", c.Set, f.describe())
		}
		c.Field = f.text
		if r := p.next(); r.kind != tRParen {
			return nil, p.errorf(r, "expected ) after %s(%s, found %s", c.Set, c.Field, r.describe())
		}
	}
	op := p.next()
	switch {
	case op.kind == tOp:
		c.Op = op.text
	case isWord(op, "not"):
		c.Negate = true
		op = p.next()
		if !isWord(op, "contains") && !isWord(op, "icontains") && !isWord(op, "startswith") && !isWord(op, "endswith") &&
			!isWord(op, "in") && !isWord(op, "between") {
			return nil, p.errorf(op, "expected contains, icontains, startswith, endswith, in or between after not, found %s", op.describe())
		}
		c.Op = strings.ToLower(op.text)
	case isWord(op, "contains") || isWord(op, "icontains") || isWord(op, "startswith") || isWord(op, "endswith") ||
		isWord(op, "in") || isWord(op, "between"):
		c.Op = strings.ToLower(op.text)
	case isWord(op, "is"):
		c.Op = "null"
		c.Negate = p.word("not")
		if n := p.next(); !isWord(n, "null") {
			return nil, p.errorf(n, "expected null after is, found %s", n.describe())
		}
		return c, nil
	default:
		return nil, p.errorf(op, "expected an operator (=, !=, <, >, <=, >=, contains, icontains, startswith, endswith, in, between, is) after %s, found %s", c.Field, op.describe())
	}
	switch c.Op {
	case "in":
		if b := p.next(); b.kind != tLBracket {
			return nil, p.errorf(b, "expected [ after in, found %s", b.describe())
		}
		for {
			v, err := p.value()
			if err != nil {
				return nil, err
			}
			if c.Values = append(c.Values, v); len(c.Values) > MaxList {
				return nil, p.errorf(p.peek(), "the in list holds more than %d values", MaxList)
			}
			sep := p.next()
			if sep.kind == tRBracket {
				break
			}
			if sep.kind != tComma {
				return nil, p.errorf(sep, "expected , or ] in the in list, found %s", sep.describe())
			}
		}
	case "between":
		lo, err := p.value()
		if err != nil {
			return nil, err
		}
		if a := p.next(); !isWord(a, "and") {
			return nil, p.errorf(a, "expected and between the two values of between, found %s", a.describe())
		}
		hi, err := p.value()
		if err != nil {
			return nil, err
		}
		c.Values = []Value{lo, hi}
	default:
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		c.Values = []Value{v}
	}
	return c, nil
}

func (p *parser) value() (Value, error) {
	t := p.next()
	switch {
	case t.kind == tString:
		return String(t.text), nil
	case t.kind == tNumber:
		return Number(t.num), nil
	case t.kind == tDatetime:
		tm, err := time.Parse(time.RFC3339Nano, t.text)
		if err != nil {
			return Value{}, p.errorf(t, "datetime(%s) is not an RFC 3339 time such as 2024-01-02T03:04:05Z", t.text)
		}
		return Time(tm), nil
	case isWord(t, "true"), isWord(t, "false"):
		return Bool(isWord(t, "true")), nil
	case isWord(t, "null"):
		return Null(), nil
	}
	return Value{}, p.errorf(t, "expected a value (string, number, true, false, null, datetime(...)), found %s", t.describe())
}

// clauses parses sort by, skip and limit, in that order.
func (p *parser) clauses(q *Query) error {
	if p.word("sort") {
		if t := p.next(); !isWord(t, "by") {
			return p.errorf(t, "expected by after sort, found %s", t.describe())
		}
		for {
			f := p.next()
			if f.kind != tIdent || isKeyword(f.text) {
				return p.errorf(f, "expected a field name to sort by, found %s", f.describe())
			}
			sf := SortField{Field: f.text}
			if p.word("desc") {
				sf.Desc = true
			} else {
				p.word("asc")
			}
			q.Sort = append(q.Sort, sf)
			if p.peek().kind != tComma {
				break
			}
			p.i++
		}
	}
	count := func(what string) (*int, error) {
		t := p.next()
		if t.kind != tNumber || t.num < 0 || t.num != float64(int(t.num)) || t.num > 1<<31 {
			return nil, p.errorf(t, "expected a whole number after %s, found %s", what, t.describe())
		}
		n := int(t.num)
		return &n, nil
	}
	var err error
	if p.word("skip") {
		if q.Skip, err = count("skip"); err != nil {
			return err
		}
	}
	if p.word("limit") {
		if p.word("none") {
			q.LimitNone = true
		} else if q.Limit, err = count("limit"); err != nil {
			return err
		}
	}
	return nil
}
