// Package filter parses and evaluates the query language of the API's list filters, the
// language API clients pass in the filter parameter of list operations: comparisons of
// fields with values joined by and, or and not, the set functions anyOf and allOf over
// list-valued fields, and trailing sort by, skip and limit clauses.
//
// Parse turns filter text into a Query without knowing the entity type; Validate checks
// the Query against the fields of one entity type; Match tells whether a record passes the
// expression and Compare orders records by the sort clause. String prints the canonical
// form of a Query, which Parse reads back to an equal Query.
//
// # Syntax
//
//	filter     = [expr] ["sort by" key {"," key}] ["skip" int] ["limit" (int | "none")]
//	expr       = and {"or" and}
//	and        = unary {"and" unary}
//	unary      = "not" unary | "(" expr ")" | "true" | "false" | comparison
//	comparison = lhs ("=" | "!=") value
//	           | lhs ("<" | ">" | "<=" | ">=") ordered
//	           | lhs ["not"] ("contains" | "icontains" | "startswith" | "endswith") string
//	           | lhs ["not"] "in" "[" value {"," value} "]"
//	           | lhs ["not"] "between" ordered "and" ordered
//	           | lhs "is" ["not"] "null"
//	lhs        = field | ("anyOf" | "allOf") "(" field ")"
//	key        = field ["asc" | "desc"]
//	field      = name {"." name}        name = [A-Za-z_][A-Za-z0-9_]*
//	value      = string | number | "true" | "false" | "null" | "datetime(" RFC 3339 ")"
//
// Keywords are case-insensitive and reserved: they cannot name fields. Field names are
// case-sensitive. Strings are double-quoted with the escapes \" \\ \n \r \t and \uXXXX;
// control characters must be escaped. Numbers are decimal, optionally negative, with an
// optional exponent (1.5, -2, 15e-10). Only = and != take null; the order operators and
// between take strings, numbers and datetimes; the values of an in list, and the two
// bounds of between, must be of one kind.
//
// The keyword operators and, or, not, contains, icontains, startswith, endswith, in,
// between, is, sort, skip and limit must be separated by whitespace from what precedes
// and follows them ("not" may directly follow "("). Together with the canonical form,
// which spends no whitespace where the syntax does not require it, this keeps the
// canonical form of any parsed filter no longer than the filter itself, so it always
// passes the MaxLength limit again.
//
// # Evaluation
//
// A field a Record lacks is null. "= null" and "is null" hold for null fields only, and
// "!= null" and "is not null" for every other field. Every other comparison with a null
// field, or with a value of another kind, is false; the negated operators (!=, not
// contains, not icontains, not startswith, not endswith, not in, not between) are the
// exact negations of their positive forms, so name != "x" holds for a record without a
// name, just as not name = "x" does.
//
// anyOf(f) holds when some element of the list f satisfies the comparison, allOf(f) when
// every element does; a null list has no elements, so allOf over it holds and anyOf does
// not.
package filter

import (
	"strconv"
	"strings"
	"time"
)

// Limits on the size of a filter; Parse rejects larger filters with a *SyntaxError.
const (
	MaxLength = 4096 // bytes of filter text
	MaxDepth  = 64   // nesting of parentheses and "not"s
	MaxList   = 1000 // values of one "in" list
)

// Kind is the type of a field or value.
type Kind int

// The kinds of values. KindNull is the kind of null, never of a field.
const (
	KindNull Kind = iota
	KindString
	KindNumber
	KindBool
	KindTime
	KindStringList // a list of strings, compared element-wise through anyOf and allOf
)

func (k Kind) String() string {
	switch k {
	case KindNull:
		return "null"
	case KindString:
		return "string"
	case KindNumber:
		return "number"
	case KindBool:
		return "boolean"
	case KindTime:
		return "datetime"
	case KindStringList:
		return "list of strings"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// withArticle is the kind's name after "a" or "an", as in `field "x" is a string`.
func (k Kind) withArticle() string {
	if k == KindNull {
		return "null"
	}
	return "a " + k.String()
}

// Value is a field's or a literal's value. The zero Value is null.
type Value struct {
	kind Kind
	str  string
	num  float64
	b    bool
	t    time.Time
	list []string
}

// String returns a string value.
func String(s string) Value { return Value{kind: KindString, str: s} }

// Number returns a number value.
func Number(f float64) Value { return Value{kind: KindNumber, num: f} }

// Bool returns a boolean value.
func Bool(b bool) Value { return Value{kind: KindBool, b: b} }

// Time returns a datetime value.
func Time(t time.Time) Value { return Value{kind: KindTime, t: t} }

// Null returns the null value.
func Null() Value { return Value{} }

// Strings returns a list-of-strings value; a nil list is an empty list, not null.
func Strings(list []string) Value { return Value{kind: KindStringList, list: list} }

// Kind returns the value's kind.
func (v Value) Kind() Kind { return v.kind }

// String returns the value as it is written in a filter. A list of strings, which has no
// literal form, is written in the form of an in list; a NaN or infinite number, which
// Parse never produces, is written as strconv writes it.
func (v Value) String() string {
	switch v.kind {
	case KindString:
		return quote(v.str)
	case KindNumber:
		return formatNumber(v.num)
	case KindBool:
		return strconv.FormatBool(v.b)
	case KindTime:
		return "datetime(" + v.t.Format(time.RFC3339Nano) + ")"
	case KindStringList:
		var b strings.Builder
		b.WriteByte('[')
		for i, s := range v.list {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(quote(s))
		}
		b.WriteByte(']')
		return b.String()
	}
	return "null"
}

// describe names the value in an error message, as in `cannot compare it with number 5`.
func (v Value) describe() string {
	switch v.kind {
	case KindString, KindNumber:
		return v.kind.String() + " " + truncate(v.String())
	case KindNull:
		return "null"
	}
	return v.String()
}

// Record is what a query matches and sorts: an entity seen through its fields.
type Record interface {
	// Field returns the named field's value; false means the record lacks the field,
	// which then compares as null.
	Field(name string) (Value, bool)
}

// Fields is a Record held in a map.
type Fields map[string]Value

// Field implements Record.
func (f Fields) Field(name string) (Value, bool) {
	v, ok := f[name]
	return v, ok
}

// Query is a parsed filter.
type Query struct {
	Expr      Expr        // nil matches every record
	Sort      []SortField // in order of precedence
	Skip      *int        // nil: no skip clause
	Limit     *int        // nil: no limit clause, or "limit none"
	LimitNone bool        // the filter says "limit none"
}

// SortField is one key of a sort by clause.
type SortField struct {
	Field string
	Desc  bool
}

// Expr is a boolean expression: BoolExpr, NotExpr, AndExpr, OrExpr or Comparison.
type Expr interface {
	String() string
	isExpr()
}

// BoolExpr is true or false standing alone: it matches every record or none.
type BoolExpr struct{ Value bool }

// NotExpr is "not X".
type NotExpr struct{ X Expr }

// AndExpr is "X and Y".
type AndExpr struct{ X, Y Expr }

// OrExpr is "X or Y".
type OrExpr struct{ X, Y Expr }

// Comparison compares a field, or each element of a list field, with literal values.
type Comparison struct {
	Set     SetFunc
	Field   string
	Op      Op
	Negated bool    // the "not" form of Contains, IContains, StartsWith, EndsWith, In, Between and IsNull
	Values  []Value // one for most operators, two for Between, one or more for In, none for IsNull
}

func (BoolExpr) isExpr()   {}
func (NotExpr) isExpr()    {}
func (AndExpr) isExpr()    {}
func (OrExpr) isExpr()     {}
func (Comparison) isExpr() {}

// SetFunc is how a comparison applies to a list field.
type SetFunc int

// The set functions.
const (
	SetNone  SetFunc = iota // the comparison applies to the field itself
	SetAnyOf                // some element must satisfy the comparison
	SetAllOf                // every element must satisfy the comparison
)

func (s SetFunc) String() string {
	switch s {
	case SetAnyOf:
		return "anyOf"
	case SetAllOf:
		return "allOf"
	}
	return ""
}

// Op is a comparison operator.
type Op int

// The comparison operators.
const (
	OpEq Op = iota
	OpNe
	OpLt
	OpGt
	OpLe
	OpGe
	OpContains
	OpIContains
	OpStartsWith
	OpEndsWith
	OpIn
	OpBetween
	OpIsNull
)

// String returns the operator as written, without its "not".
func (o Op) String() string {
	switch o {
	case OpEq:
		return "="
	case OpNe:
		return "!="
	case OpLt:
		return "<"
	case OpGt:
		return ">"
	case OpLe:
		return "<="
	case OpGe:
		return ">="
	case OpContains:
		return "contains"
	case OpIContains:
		return "icontains"
	case OpStartsWith:
		return "startswith"
	case OpEndsWith:
		return "endswith"
	case OpIn:
		return "in"
	case OpBetween:
		return "between"
	case OpIsNull:
		return "is null"
	}
	return "op(" + strconv.Itoa(int(o)) + ")"
}

// symbolic reports whether the operator is written with symbols rather than words.
func (o Op) symbolic() bool { return o <= OpGe }

// opName is the comparison's operator as written, with its "not".
func (c Comparison) opName() string {
	switch {
	case c.Op == OpIsNull && c.Negated:
		return "is not null"
	case c.Negated:
		return "not " + c.Op.String()
	}
	return c.Op.String()
}

// lhs is the comparison's left-hand side as written.
func (c Comparison) lhs() string {
	if c.Set == SetNone {
		return c.Field
	}
	return c.Set.String() + "(" + c.Field + ")"
}
