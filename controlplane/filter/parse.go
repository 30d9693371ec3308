package filter

import (
	"strconv"
	"unicode/utf8"
)

// Parse parses a filter. Empty or blank text is the query that matches every record in
// no particular order. Errors are *SyntaxError.
func Parse(s string) (*Query, error) {
	if len(s) > MaxLength {
		return nil, syntaxErr(MaxLength, "filter is longer than %d bytes", MaxLength)
	}
	for i, r := range s {
		if r == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(s[i:]); n == 1 {
				return nil, syntaxErr(i, "invalid UTF-8")
			}
		}
	}
	p := &parser{lex: lexer{src: s}}
	if err := p.advance(); err != nil {
		return nil, err
	}
	return p.parseQuery()
}

type parser struct {
	lex   lexer
	tok   token // the current token
	depth int   // nesting of parentheses and "not"s around the current token
}

func (p *parser) advance() error {
	t, err := p.lex.next()
	if err != nil {
		return err
	}
	p.tok = t
	return nil
}

// expected is the error of finding the current token where what was expected.
func (p *parser) expected(what string) error {
	return syntaxErr(p.tok.pos, "expected %s, found %s", what, p.tok.describe())
}

// keyword consumes the current token, a keyword that must stand between whitespace.
func (p *parser) keyword() error {
	kw := p.tok
	if !kw.spaced {
		return syntaxErr(kw.pos, "expected whitespace before %q", kw.text)
	}
	if err := p.advance(); err != nil {
		return err
	}
	if !p.tok.spaced && p.tok.kind != tokEOF {
		return syntaxErr(p.tok.pos, "expected whitespace after %q, found %s", kw.text, p.tok.describe())
	}
	return nil
}

// enter notes one more level of nesting at the current token.
func (p *parser) enter() error {
	p.depth++
	if p.depth > MaxDepth {
		return syntaxErr(p.tok.pos, "filter nests parentheses and \"not\" deeper than %d levels", MaxDepth)
	}
	return nil
}

func (p *parser) atClause() bool {
	switch p.tok.kw {
	case "sort", "skip", "limit":
		return true
	}
	return p.tok.kind == tokEOF
}

func (p *parser) parseQuery() (*Query, error) {
	q := &Query{}
	if !p.atClause() {
		e, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		q.Expr = e
	}
	if p.tok.kw == "sort" {
		if err := p.parseSort(q); err != nil {
			return nil, err
		}
	}
	if p.tok.kw == "skip" {
		n, err := p.parseCount()
		if err != nil {
			return nil, err
		}
		q.Skip = &n
	}
	if p.tok.kw == "limit" {
		if err := p.keyword(); err != nil {
			return nil, err
		}
		if p.tok.kw == "none" {
			q.LimitNone = true
			if err := p.advance(); err != nil {
				return nil, err
			}
		} else {
			n, err := p.count("limit", `a non-negative integer or "none"`)
			if err != nil {
				return nil, err
			}
			q.Limit = &n
		}
	}
	if p.tok.kind != tokEOF {
		var what string
		switch {
		case q.LimitNone || q.Limit != nil:
			what = "end of input"
		case q.Skip != nil:
			what = `"limit" or end of input`
		case q.Sort != nil:
			what = `",", "skip", "limit" or end of input`
		case q.Expr != nil:
			what = `"and", "or", "sort by", "skip", "limit" or end of input`
		}
		return nil, p.expected(what)
	}
	return q, nil
}

func (p *parser) parseSort(q *Query) error {
	if err := p.keyword(); err != nil {
		return err
	}
	if p.tok.kw != "by" {
		return p.expected(`"by" after "sort"`)
	}
	if err := p.advance(); err != nil {
		return err
	}
	for {
		if p.tok.kind != tokWord || p.tok.kw != "" {
			return p.expected("a field to sort by")
		}
		f := SortField{Field: p.tok.text}
		if err := p.advance(); err != nil {
			return err
		}
		if p.tok.kw == "asc" || p.tok.kw == "desc" {
			f.Desc = p.tok.kw == "desc"
			if err := p.advance(); err != nil {
				return err
			}
		}
		q.Sort = append(q.Sort, f)
		if p.tok.kind != tokComma {
			return nil
		}
		if err := p.advance(); err != nil {
			return err
		}
	}
}

// parseCount parses "skip N".
func (p *parser) parseCount() (int, error) {
	if err := p.keyword(); err != nil {
		return 0, err
	}
	return p.count("skip", "a non-negative integer")
}

// count parses the non-negative integer after the keyword kw.
func (p *parser) count(kw, what string) (int, error) {
	t := p.tok
	if t.kind != tokNumber {
		return 0, p.expected(what + " after " + strconv.Quote(kw))
	}
	for i := 0; i < len(t.text); i++ {
		if !isDigit(t.text[i]) {
			return 0, p.expected(what + " after " + strconv.Quote(kw))
		}
	}
	n, err := strconv.Atoi(t.text)
	if err != nil {
		return 0, syntaxErr(t.pos, "%s %s is too large", kw, truncate(t.text))
	}
	return n, p.advance()
}

func (p *parser) parseOr() (Expr, error) {
	x, err := p.parseAnd()
	if err != nil {
		return nil, err
	}
	for p.tok.kw == "or" {
		if err := p.keyword(); err != nil {
			return nil, err
		}
		y, err := p.parseAnd()
		if err != nil {
			return nil, err
		}
		x = OrExpr{X: x, Y: y}
	}
	return x, nil
}

func (p *parser) parseAnd() (Expr, error) {
	x, err := p.parseUnary()
	if err != nil {
		return nil, err
	}
	for p.tok.kw == "and" {
		if err := p.keyword(); err != nil {
			return nil, err
		}
		y, err := p.parseUnary()
		if err != nil {
			return nil, err
		}
		x = AndExpr{X: x, Y: y}
	}
	return x, nil
}

func (p *parser) parseUnary() (Expr, error) {
	switch {
	case p.tok.kw == "not":
		if err := p.enter(); err != nil {
			return nil, err
		}
		if err := p.keyword(); err != nil {
			return nil, err
		}
		x, err := p.parseUnary()
		if err != nil {
			return nil, err
		}
		p.depth--
		return NotExpr{X: x}, nil
	case p.tok.kind == tokLParen:
		if err := p.enter(); err != nil {
			return nil, err
		}
		if err := p.advance(); err != nil {
			return nil, err
		}
		x, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		if p.tok.kind != tokRParen {
			return nil, p.expected(`"and", "or" or ")"`)
		}
		p.depth--
		return x, p.advance()
	case p.tok.kw == "true" || p.tok.kw == "false":
		x := BoolExpr{Value: p.tok.kw == "true"}
		return x, p.advance()
	case p.tok.kw == "anyof" || p.tok.kw == "allof":
		c := Comparison{Set: SetAnyOf}
		if p.tok.kw == "allof" {
			c.Set = SetAllOf
		}
		if err := p.advance(); err != nil {
			return nil, err
		}
		if p.tok.kind != tokLParen {
			return nil, p.expected(`"(" after "` + c.Set.String() + `"`)
		}
		if err := p.advance(); err != nil {
			return nil, err
		}
		if p.tok.kind != tokWord || p.tok.kw != "" {
			return nil, p.expected("a list field inside " + c.Set.String() + "(...)")
		}
		c.Field = p.tok.text
		if err := p.advance(); err != nil {
			return nil, err
		}
		if p.tok.kind != tokRParen {
			return nil, p.expected(`")" after ` + c.Set.String() + "(" + c.Field)
		}
		if err := p.advance(); err != nil {
			return nil, err
		}
		return p.parseOperator(c)
	case p.tok.kind == tokWord && p.tok.kw == "":
		c := Comparison{Field: p.tok.text}
		if err := p.advance(); err != nil {
			return nil, err
		}
		return p.parseOperator(c)
	}
	return nil, p.expected(`a field, "(", "not", "true" or "false"`)
}

// Sets of value kinds an operator takes.
const (
	anyValue     = "a value"
	orderedValue = "a string, number or datetime"
	stringValue  = "a string"
	listValue    = "a string, number, boolean or datetime"
)

func accepts(set string, k Kind) bool {
	switch set {
	case anyValue:
		return true
	case orderedValue:
		return k == KindString || k == KindNumber || k == KindTime
	case stringValue:
		return k == KindString
	}
	return k != KindNull
}

// parseOperator parses the operator and values of a comparison whose left-hand side is c.
func (p *parser) parseOperator(c Comparison) (Expr, error) {
	if p.tok.kind == tokOp {
		switch p.tok.text {
		case "=":
			c.Op = OpEq
		case "!=":
			c.Op = OpNe
		case "<":
			c.Op = OpLt
		case ">":
			c.Op = OpGt
		case "<=":
			c.Op = OpLe
		case ">=":
			c.Op = OpGe
		}
		set := orderedValue
		if c.Op == OpEq || c.Op == OpNe {
			set = anyValue
		}
		if err := p.advance(); err != nil {
			return nil, err
		}
		v, err := p.value(set, "after "+strconv.Quote(c.Op.String()))
		if err != nil {
			return nil, err
		}
		c.Values = []Value{v}
		return c, nil
	}
	const wordOps = `"contains", "icontains", "startswith", "endswith", "in" or "between"`
	if p.tok.kw == "not" {
		if err := p.keyword(); err != nil {
			return nil, err
		}
		c.Negated = true
		switch p.tok.kw {
		case "contains", "icontains", "startswith", "endswith", "in", "between":
		default:
			return nil, p.expected(wordOps + ` after "not"`)
		}
	}
	switch p.tok.kw {
	case "contains", "icontains", "startswith", "endswith":
		switch p.tok.kw {
		case "contains":
			c.Op = OpContains
		case "icontains":
			c.Op = OpIContains
		case "startswith":
			c.Op = OpStartsWith
		default:
			c.Op = OpEndsWith
		}
		if err := p.keyword(); err != nil {
			return nil, err
		}
		v, err := p.value(stringValue, "after "+strconv.Quote(c.opName()))
		if err != nil {
			return nil, err
		}
		c.Values = []Value{v}
		return c, nil
	case "in":
		c.Op = OpIn
		if err := p.keyword(); err != nil {
			return nil, err
		}
		return c, p.parseList(&c)
	case "between":
		c.Op = OpBetween
		if err := p.keyword(); err != nil {
			return nil, err
		}
		lo, err := p.value(orderedValue, "after "+strconv.Quote(c.opName()))
		if err != nil {
			return nil, err
		}
		if p.tok.kw != "and" {
			return nil, p.expected(`"and" after the lower bound of "between"`)
		}
		if err := p.keyword(); err != nil {
			return nil, err
		}
		at := p.tok.pos
		hi, err := p.value(orderedValue, `after "between ... and"`)
		if err != nil {
			return nil, err
		}
		if hi.kind != lo.kind {
			return nil, syntaxErr(at, `the bounds of "between" must be of one kind, found %s and %s`, lo.kind, hi.kind)
		}
		c.Values = []Value{lo, hi}
		return c, nil
	case "is":
		c.Op = OpIsNull
		if err := p.keyword(); err != nil {
			return nil, err
		}
		if p.tok.kw == "not" {
			c.Negated = true
			if err := p.advance(); err != nil {
				return nil, err
			}
		}
		if p.tok.kw != "null" {
			if c.Negated {
				return nil, p.expected(`"null" after "is not"`)
			}
			return nil, p.expected(`"null" or "not null" after "is"`)
		}
		return c, p.advance()
	}
	return nil, p.expected(`an operator after ` + strconv.Quote(c.lhs()))
}

// parseList parses the bracketed values of an in list.
func (p *parser) parseList(c *Comparison) error {
	if p.tok.kind != tokLBrack {
		return p.expected(`"[" after ` + strconv.Quote(c.opName()))
	}
	if err := p.advance(); err != nil {
		return err
	}
	for {
		if len(c.Values) == MaxList {
			return syntaxErr(p.tok.pos, `"in" list has more than %d values`, MaxList)
		}
		at := p.tok.pos
		v, err := p.value(listValue, `in "in" list`)
		if err != nil {
			return err
		}
		if len(c.Values) > 0 && v.kind != c.Values[0].kind {
			return syntaxErr(at, `the values of an "in" list must be of one kind, found %s and %s`, c.Values[0].kind, v.kind)
		}
		c.Values = append(c.Values, v)
		switch p.tok.kind {
		case tokComma:
			if err := p.advance(); err != nil {
				return err
			}
		case tokRBrack:
			return p.advance()
		default:
			return p.expected(`"," or "]" in "in" list`)
		}
	}
}

// value parses a literal of a kind in set; where says where, for the error message.
func (p *parser) value(set, where string) (Value, error) {
	var v Value
	switch t := p.tok; {
	case t.kind == tokString || t.kind == tokNumber || t.kind == tokTime:
		v = t.val
	case t.kw == "true" || t.kw == "false":
		v = Bool(t.kw == "true")
	case t.kw == "null":
		v = Null()
	default:
		return Value{}, p.expected(set + " " + where)
	}
	if !accepts(set, v.kind) {
		return Value{}, p.expected(set + " " + where)
	}
	return v, p.advance()
}
