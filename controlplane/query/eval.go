package query

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Kind is the type of a field or value.
type Kind int

const (
	KindNull Kind = iota
	KindString
	KindNumber
	KindBool
	KindTime
	KindStrings // a list of strings, compared through anyOf and allOf
)

func (k Kind) String() string {
	return [...]string{"null", "string", "number", "boolean", "datetime", "list of strings"}[k]
}

// Value is a field's or a literal's value.
type Value struct {
	kind Kind
	s    string
	n    float64
	b    bool
	t    time.Time
	list []string
}

// Constructors of values.
func String(s string) Value    { return Value{kind: KindString, s: s} }
func Number(n float64) Value   { return Value{kind: KindNumber, n: n} }
func Bool(b bool) Value        { return Value{kind: KindBool, b: b} }
func Time(t time.Time) Value   { return Value{kind: KindTime, t: t} }
func Strings(l []string) Value { return Value{kind: KindStrings, list: l} }
func Null() Value              { return Value{} }
func (v Value) Kind() Kind     { return v.kind }

// String renders a literal the way Parse reads it.
func (v Value) String() string {
	switch v.kind {
	case KindString:
		return strconv.Quote(v.s)
	case KindNumber:
		return strconv.FormatFloat(v.n, 'g', -1, 64)
	case KindBool:
		return strconv.FormatBool(v.b)
	case KindTime:
		return "datetime(" + v.t.Format(time.RFC3339Nano) + ")"
	case KindStrings:
		q := make([]string, len(v.list))
		for i, s := range v.list {
			q[i] = strconv.Quote(s)
		}
		return "[" + strings.Join(q, ", ") + "]"
	}
	return "null"
}

// order compares two non-null values of one kind.
func order(a, b Value) int {
	switch a.kind {
	case KindString:
		return strings.Compare(a.s, b.s)
	case KindNumber:
		return cmp.Compare(a.n, b.n)
	case KindBool:
		if a.b == b.b {
			return 0
		}
		if !a.b {
			return -1
		}
		return 1
	case KindTime:
		return a.t.Compare(b.t)
	}
	return 0
}

// Record is an entity as the query sees it: its fields by name. An absent field is null.
type Record interface {
	Field(name string) (Value, bool)
}

// Match reports whether r satisfies the query's expression.
func (q *Query) Match(r Record) bool { return q.Expr == nil || eval(q.Expr, r) }

func eval(n Node, r Record) bool {
	switch x := n.(type) {
	case And:
		return eval(x.Left, r) && eval(x.Right, r)
	case Or:
		return eval(x.Left, r) || eval(x.Right, r)
	case Not:
		return !eval(x.X, r)
	case Const:
		return x.Value
	case Compare:
		v, ok := r.Field(x.Field)
		if !ok {
			v = Null()
		}
		switch x.Set {
		case SetAnyOf:
			return slices.ContainsFunc(v.list, func(s string) bool { return x.test(String(s)) })
		case SetAllOf:
			return !slices.ContainsFunc(v.list, func(s string) bool { return !x.test(String(s)) })
		}
		return x.test(v)
	}
	return false
}

// test applies a comparison to one value. A null value equals only null; != is the negation
// of =, so a null field is != to every non-null value; every ordering and string test on null
// is false.
func (c Compare) test(v Value) bool {
	result := false
	switch c.Op {
	case "null":
		result = v.kind == KindNull
	case "=":
		result = equal(v, c.Values[0])
	case "!=":
		result = !equal(v, c.Values[0])
	case "in":
		result = slices.ContainsFunc(c.Values, func(w Value) bool { return equal(v, w) })
	case "<", ">", "<=", ">=":
		w := c.Values[0]
		if v.kind == KindNull || w.kind != v.kind {
			return false
		}
		o := order(v, w)
		result = c.Op == "<" && o < 0 || c.Op == ">" && o > 0 || c.Op == "<=" && o <= 0 || c.Op == ">=" && o >= 0
	case "between":
		lo, hi := c.Values[0], c.Values[1]
		if v.kind == KindNull || lo.kind != v.kind || hi.kind != v.kind {
			return false
		}
		result = order(v, lo) >= 0 && order(v, hi) <= 0
	case "contains", "icontains", "startswith", "endswith":
		if v.kind != KindString || c.Values[0].kind != KindString {
			return false
		}
		s, sub := v.s, c.Values[0].s
		switch c.Op {
		case "contains":
			result = strings.Contains(s, sub)
		case "icontains":
			result = strings.Contains(strings.ToLower(s), strings.ToLower(sub))
		case "startswith":
			result = strings.HasPrefix(s, sub)
		case "endswith":
			result = strings.HasSuffix(s, sub)
		}
	}
	if c.Negate {
		return !result
	}
	return result
}

func equal(a, b Value) bool {
	if a.kind != b.kind {
		return false
	}
	return a.kind == KindNull || order(a, b) == 0
}

// Compare orders two records by the sort fields: nulls first, then ascending values, each
// key reversed by desc.
func (q *Query) Compare(a, b Record) int {
	for _, s := range q.Sort {
		va, _ := a.Field(s.Field)
		vb, _ := b.Field(s.Field)
		var o int
		switch {
		case va.kind == KindNull && vb.kind == KindNull:
			o = 0
		case va.kind == KindNull:
			o = -1
		case vb.kind == KindNull:
			o = 1
		case va.kind != vb.kind:
			o = cmp.Compare(va.kind, vb.kind)
		default:
			o = order(va, vb)
		}
		if s.Desc {
			o = -o
		}
		if o != 0 {
			return o
		}
	}
	return 0
}

// Validate checks every field the query names against schema (field name to kind) and that
// every operator and value suits its field.
func (q *Query) Validate(schema map[string]Kind) error {
	known := func(field string) (Kind, error) {
		k, ok := schema[field]
		if !ok {
			names := make([]string, 0, len(schema))
			for n := range schema {
				names = append(names, n)
			}
			slices.Sort(names)
			return 0, fmt.Errorf("unknown field %q; known fields: %s", field, strings.Join(names, ", "))
		}
		return k, nil
	}
	for _, s := range q.Sort {
		k, err := known(s.Field)
		if err != nil {
			return err
		}
		if k == KindStrings {
			return fmt.Errorf("field %q is a list and cannot be sorted by", s.Field)
		}
	}
	if q.Expr == nil {
		return nil
	}
	return validate(q.Expr, known)
}

func validate(n Node, known func(string) (Kind, error)) error {
	switch x := n.(type) {
	case And:
		if err := validate(x.Left, known); err != nil {
			return err
		}
		return validate(x.Right, known)
	case Or:
		if err := validate(x.Left, known); err != nil {
			return err
		}
		return validate(x.Right, known)
	case Not:
		return validate(x.X, known)
	case Compare:
		k, err := known(x.Field)
		if err != nil {
			return err
		}
		if x.Set != SetNone {
			if k != KindStrings {
				return fmt.Errorf("%s() applies to list fields; field %q is a %s", x.Set, x.Field, k)
			}
			k = KindString
		} else if k == KindStrings {
			return fmt.Errorf("field %q is a list; compare its elements with anyOf(%s) or allOf(%s)", x.Field, x.Field, x.Field)
		}
		switch x.Op {
		case "contains", "icontains", "startswith", "endswith":
			if k != KindString {
				return fmt.Errorf("field %q is a %s; %q applies to strings", x.Field, k, x.Op)
			}
		case "<", ">", "<=", ">=", "between":
			if k == KindBool {
				return fmt.Errorf("field %q is a boolean; %q applies to strings, numbers and datetimes", x.Field, x.Op)
			}
		}
		for _, v := range x.Values {
			nullOK := x.Op == "=" || x.Op == "!=" || x.Op == "in"
			if v.kind == KindNull && nullOK {
				continue
			}
			if v.kind != k {
				return fmt.Errorf("field %q is a %s; %s is a %s", x.Field, k, v, v.kind)
			}
		}
	}
	return nil
}
