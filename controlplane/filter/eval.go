package filter

import (
	"cmp"
	"math"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Match reports whether r passes the query's expression; a query without one matches
// every record. Match does not need a validated query: a comparison with a value of
// another kind than the field's is false (its negated form true).
func (q *Query) Match(r Record) bool {
	if q == nil {
		return true
	}
	return eval(q.Expr, r)
}

func eval(e Expr, r Record) bool {
	switch e := e.(type) {
	case BoolExpr:
		return e.Value
	case NotExpr:
		return !eval(e.X, r)
	case AndExpr:
		return eval(e.X, r) && eval(e.Y, r)
	case OrExpr:
		return eval(e.X, r) || eval(e.Y, r)
	case Comparison:
		return e.match(r)
	}
	return true // nil
}

// field is the named field of r, null if r lacks it.
func field(r Record, name string) Value {
	if v, ok := r.Field(name); ok {
		return v
	}
	return Null()
}

func (c Comparison) match(r Record) bool {
	v := field(r, c.Field)
	if c.Set == SetNone {
		return c.test(v)
	}
	all := c.Set == SetAllOf
	switch v.kind {
	case KindNull:
		return all
	case KindStringList:
		for _, s := range v.list {
			if c.test(String(s)) != all {
				return !all
			}
		}
		return all
	}
	return c.test(v) // a single value is a list of one
}

// test applies the comparison to one value.
func (c Comparison) test(v Value) bool {
	return c.holds(v) != (c.Negated || c.Op == OpNe)
}

// holds applies the comparison's positive form (= for !=) to v.
func (c Comparison) holds(v Value) bool {
	args := c.Values
	switch c.Op {
	case OpIsNull:
		return v.kind == KindNull
	case OpEq, OpNe:
		return len(args) == 1 && equal(v, args[0])
	case OpLt, OpGt, OpLe, OpGe:
		if len(args) != 1 {
			return false
		}
		o, ok := order(v, args[0])
		switch {
		case !ok:
			return false
		case c.Op == OpLt:
			return o < 0
		case c.Op == OpGt:
			return o > 0
		case c.Op == OpLe:
			return o <= 0
		}
		return o >= 0
	case OpContains, OpIContains, OpStartsWith, OpEndsWith:
		if len(args) != 1 || v.kind != KindString || args[0].kind != KindString {
			return false
		}
		switch s, sub := v.str, args[0].str; c.Op {
		case OpContains:
			return strings.Contains(s, sub)
		case OpIContains:
			return containsFold(s, sub)
		case OpStartsWith:
			return strings.HasPrefix(s, sub)
		}
		return strings.HasSuffix(v.str, args[0].str)
	case OpIn:
		for _, a := range args {
			if equal(v, a) {
				return true
			}
		}
		return false
	case OpBetween:
		if len(args) != 2 {
			return false
		}
		lo, ok1 := order(v, args[0])
		hi, ok2 := order(v, args[1])
		return ok1 && ok2 && lo >= 0 && hi <= 0
	}
	return false
}

// equal reports whether a and b are of one kind and equal; null equals null.
func equal(a, b Value) bool {
	if a.kind != b.kind {
		return false
	}
	switch a.kind {
	case KindString:
		return a.str == b.str
	case KindNumber:
		return a.num == b.num
	case KindBool:
		return a.b == b.b
	case KindTime:
		return a.t.Equal(b.t)
	case KindStringList:
		return slices.Equal(a.list, b.list)
	}
	return true
}

// order compares strings, numbers or datetimes of one kind; false if they are not ordered.
func order(a, b Value) (int, bool) {
	if a.kind != b.kind {
		return 0, false
	}
	switch a.kind {
	case KindString:
		return strings.Compare(a.str, b.str), true
	case KindNumber:
		if math.IsNaN(a.num) || math.IsNaN(b.num) {
			return 0, false
		}
		return cmp.Compare(a.num, b.num), true
	case KindTime:
		return a.t.Compare(b.t), true
	}
	return 0, false
}

// containsFold reports whether sub is within s under simple Unicode case folding.
func containsFold(s, sub string) bool {
	for i := 0; ; {
		if hasPrefixFold(s[i:], sub) {
			return true
		}
		if i >= len(s) {
			return false
		}
		_, n := utf8.DecodeRuneInString(s[i:])
		i += n
	}
}

// hasPrefixFold is strings.HasPrefix under simple Unicode case folding.
func hasPrefixFold(s, prefix string) bool {
	for prefix != "" {
		if s == "" {
			return false
		}
		r, n := utf8.DecodeRuneInString(s)
		pr, pn := utf8.DecodeRuneInString(prefix)
		s, prefix = s[n:], prefix[pn:]
		if !equalFold(r, pr) {
			return false
		}
	}
	return true
}

func equalFold(a, b rune) bool {
	if a == b {
		return true
	}
	if a < utf8.RuneSelf && b < utf8.RuneSelf {
		return 'A' <= a && a <= 'Z' && a+'a'-'A' == b || 'A' <= b && b <= 'Z' && b+'a'-'A' == a
	}
	for f := unicode.SimpleFold(a); f != a; f = unicode.SimpleFold(f) {
		if f == b {
			return true
		}
	}
	return false
}

// Compare orders records by the query's sort clause: negative if a comes first, positive
// if b does, 0 on a tie or without a sort clause. Null and absent fields come before any
// value, and values of different kinds in the order of their Kind; strings compare by
// bytes, numbers numerically, datetimes chronologically, false before true. Descending
// keys reverse all of it.
func (q *Query) Compare(a, b Record) int {
	if q == nil {
		return 0
	}
	for _, s := range q.Sort {
		if c := compareValues(field(a, s.Field), field(b, s.Field)); c != 0 {
			if s.Desc {
				return -c
			}
			return c
		}
	}
	return 0
}

func compareValues(a, b Value) int {
	if a.kind != b.kind {
		return cmp.Compare(a.kind, b.kind)
	}
	switch a.kind {
	case KindString:
		return strings.Compare(a.str, b.str)
	case KindNumber:
		return cmp.Compare(a.num, b.num)
	case KindBool:
		switch {
		case a.b == b.b:
			return 0
		case b.b:
			return -1
		}
		return 1
	case KindTime:
		return a.t.Compare(b.t)
	case KindStringList:
		return slices.Compare(a.list, b.list)
	}
	return 0
}
