package filter

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// FieldError is a query that parses but does not suit the fields of an entity type.
type FieldError struct {
	Field string // the field at fault
	Msg   string // the whole message, which names the field
}

func (e *FieldError) Error() string { return e.Msg }

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Validate checks the query against schema, the kinds of the fields of an entity type.
// Every field the query names must be in schema. A list field is compared through anyOf
// or allOf, and only a list field is; it may also be tested for null by itself. The
// operators and values must suit the kind compared: contains, icontains, startswith and
// endswith apply to strings; <, >, <=, >= and between to strings, numbers and datetimes;
// =, != and in to every kind; and each value must be of the field's (or, under anyOf and
// allOf, the elements') kind, or null for = and !=. A list field cannot be a sort key.
// Errors are *FieldError.
func (q *Query) Validate(schema map[string]Kind) error {
	if q == nil {
		return nil
	}
	if err := validateExpr(q.Expr, schema); err != nil {
		return err
	}
	for _, s := range q.Sort {
		kind, err := lookup(schema, s.Field)
		if err != nil {
			return err
		}
		if kind == KindStringList {
			return fieldErr(s.Field, "cannot sort by %q: it is a list of strings", s.Field)
		}
	}
	return nil
}

func lookup(schema map[string]Kind, field string) (Kind, error) {
	kind, ok := schema[field]
	if !ok {
		if len(schema) == 0 {
			return 0, fieldErr(field, "unknown field %q; no fields are known", field)
		}
		known := slices.Sorted(maps.Keys(schema))
		return 0, fieldErr(field, "unknown field %q; known fields: %s", field, strings.Join(known, ", "))
	}
	if kind <= KindNull || kind > KindStringList {
		return 0, fieldErr(field, "field %q has no valid kind in the schema (%v)", field, kind)
	}
	return kind, nil
}

func validateExpr(e Expr, schema map[string]Kind) error {
	switch e := e.(type) {
	case NotExpr:
		return validateExpr(e.X, schema)
	case AndExpr:
		if err := validateExpr(e.X, schema); err != nil {
			return err
		}
		return validateExpr(e.Y, schema)
	case OrExpr:
		if err := validateExpr(e.X, schema); err != nil {
			return err
		}
		return validateExpr(e.Y, schema)
	case Comparison:
		return validateComparison(e, schema)
	}
	return nil
}

func validateComparison(c Comparison, schema map[string]Kind) error {
	kind, err := lookup(schema, c.Field)
	if err != nil {
		return err
	}
	nullTest := c.Op == OpIsNull || (c.Op == OpEq || c.Op == OpNe) && len(c.Values) == 1 && c.Values[0].kind == KindNull
	subject := "field " + strconv.Quote(c.Field) + " is " + kind.withArticle()
	switch {
	case c.Set != SetNone && kind != KindStringList:
		return fieldErr(c.Field, "%s; %s applies to lists", subject, c.Set)
	case c.Set != SetNone && nullTest:
		return fieldErr(c.Field, "%s compares the elements of %q, which are never null; test the list itself, as in %s is null",
			c.lhs(), c.Field, c.Field)
	case c.Set != SetNone:
		kind = KindString
		subject = "the elements of " + strconv.Quote(c.Field) + " are strings"
	case kind == KindStringList && nullTest:
		return nil
	case kind == KindStringList:
		return fieldErr(c.Field, "%s; compare its elements with anyOf(%s) or allOf(%s)", subject, c.Field, c.Field)
	case nullTest:
		return nil
	}
	switch c.Op {
	case OpContains, OpIContains, OpStartsWith, OpEndsWith:
		if kind != KindString {
			return fieldErr(c.Field, "%s; %q applies to strings", subject, c.opName())
		}
	case OpLt, OpGt, OpLe, OpGe, OpBetween:
		if kind != KindString && kind != KindNumber && kind != KindTime {
			return fieldErr(c.Field, "%s; %q applies to strings, numbers and datetimes", subject, c.opName())
		}
	}
	pronoun := "it"
	if c.Set != SetNone {
		pronoun = "them"
	}
	for _, v := range c.Values {
		if v.kind != kind {
			return fieldErr(c.Field, "%s; cannot compare %s with %s", subject, pronoun, v.describe())
		}
	}
	return nil
}
