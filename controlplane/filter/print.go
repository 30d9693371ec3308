package filter

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// String returns the canonical form of the query: keywords in lower case, no parentheses
// but those the structure needs, no "asc", and whitespace only where the syntax needs it.
// Parse reads it back to an equal Query. The canonical form of a parsed filter is never
// longer than the filter.
func (q *Query) String() string {
	if q == nil {
		return ""
	}
	var b strings.Builder
	if q.Expr != nil {
		writeExpr(&b, q.Expr)
	}
	space := func() {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
	}
	if len(q.Sort) > 0 {
		space()
		b.WriteString("sort by ")
		for i, s := range q.Sort {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(s.Field)
			if s.Desc {
				b.WriteString(" desc")
			}
		}
	}
	if q.Skip != nil {
		space()
		b.WriteString("skip ")
		b.WriteString(strconv.Itoa(*q.Skip))
	}
	switch {
	case q.LimitNone:
		space()
		b.WriteString("limit none")
	case q.Limit != nil:
		space()
		b.WriteString("limit ")
		b.WriteString(strconv.Itoa(*q.Limit))
	}
	return b.String()
}

func (e BoolExpr) String() string   { return exprString(e) }
func (e NotExpr) String() string    { return exprString(e) }
func (e AndExpr) String() string    { return exprString(e) }
func (e OrExpr) String() string     { return exprString(e) }
func (e Comparison) String() string { return exprString(e) }

func exprString(e Expr) string {
	var b strings.Builder
	writeExpr(&b, e)
	return b.String()
}

// Precedence levels of expressions.
const (
	precOr = iota + 1
	precAnd
	precUnary
)

func precedence(e Expr) int {
	switch e.(type) {
	case OrExpr:
		return precOr
	case AndExpr:
		return precAnd
	}
	return precUnary
}

// writeExpr writes e in canonical form. Binary operators associate to the left, so a
// right operand of the same precedence keeps its parentheses.
func writeExpr(b *strings.Builder, e Expr) {
	switch e := e.(type) {
	case nil:
		b.WriteString("true")
	case BoolExpr:
		b.WriteString(strconv.FormatBool(e.Value))
	case NotExpr:
		b.WriteString("not ")
		writeOperand(b, e.X, precUnary)
	case AndExpr:
		writeOperand(b, e.X, precAnd)
		b.WriteString(" and ")
		writeOperand(b, e.Y, precUnary)
	case OrExpr:
		writeOperand(b, e.X, precOr)
		b.WriteString(" or ")
		writeOperand(b, e.Y, precAnd)
	case Comparison:
		writeComparison(b, e)
	}
}

func writeOperand(b *strings.Builder, e Expr, min int) {
	if precedence(e) < min {
		b.WriteByte('(')
		writeExpr(b, e)
		b.WriteByte(')')
		return
	}
	writeExpr(b, e)
}

func writeComparison(b *strings.Builder, c Comparison) {
	b.WriteString(c.lhs())
	if c.Op.symbolic() {
		b.WriteString(c.Op.String())
		if len(c.Values) > 0 {
			b.WriteString(c.Values[0].String())
		}
		return
	}
	b.WriteByte(' ')
	b.WriteString(c.opName())
	switch c.Op {
	case OpIsNull:
	case OpIn:
		b.WriteString(" [")
		for i, v := range c.Values {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(v.String())
		}
		b.WriteByte(']')
	case OpBetween:
		for i, v := range c.Values {
			if i > 0 {
				b.WriteString(" and")
			}
			b.WriteByte(' ')
			b.WriteString(v.String())
		}
	default:
		for _, v := range c.Values {
			b.WriteByte(' ')
			b.WriteString(v.String())
		}
	}
}

// quote writes s as a string literal, escaping quotes, backslashes and control characters.
func quote(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if c < 0x20 {
				b.WriteString(`\u00`)
				b.WriteByte("0123456789abcdef"[c>>4])
				b.WriteByte("0123456789abcdef"[c&0xf])
			} else {
				b.WriteByte(c)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}

// formatNumber writes f in the shorter of plain decimal form (1500, 0.25) and the form
// with an integer mantissa and an exponent (15e-10), preferring plain decimal on a tie.
// Either uses the fewest digits that identify f.
func formatNumber(f float64) string {
	plain := strconv.FormatFloat(f, 'f', -1, 64)
	e := strconv.FormatFloat(f, 'e', -1, 64) // [-]d[.ddd]e±dd, or NaN, +Inf, -Inf
	at := strings.IndexByte(e, 'e')
	if at < 0 {
		return plain
	}
	exp, err := strconv.Atoi(e[at+1:])
	if err != nil {
		return plain
	}
	mantissa := e[:at]
	if dot := strings.IndexByte(mantissa, '.'); dot >= 0 {
		exp -= len(mantissa) - dot - 1
		mantissa = mantissa[:dot] + mantissa[dot+1:]
	}
	if exp == 0 {
		return plain
	}
	if sci := mantissa + "e" + strconv.Itoa(exp); len(sci) < len(plain) {
		return sci
	}
	return plain
}

// truncate shortens source text quoted in an error message.
func truncate(s string) string {
	const max = 40
	if len(s) <= max {
		return s
	}
	cut := max - 3
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
