package query

import (
	"strconv"
	"strings"
)

// String renders the query in a canonical form that Parse reads back to an equal query.
func (q *Query) String() string {
	var parts []string
	if q.Expr != nil {
		parts = append(parts, render(q.Expr))
	}
	if len(q.Sort) > 0 {
		keys := make([]string, len(q.Sort))
		for i, s := range q.Sort {
			keys[i] = s.Field + " asc"
			if s.Desc {
				keys[i] = s.Field + " desc"
			}
		}
		parts = append(parts, "sort by "+strings.Join(keys, ", "))
	}
	if q.Skip != nil {
		parts = append(parts, "skip "+strconv.Itoa(*q.Skip))
	}
	switch {
	case q.LimitNone:
		parts = append(parts, "limit none")
	case q.Limit != nil:
		parts = append(parts, "limit "+strconv.Itoa(*q.Limit))
	}
	return strings.Join(parts, " ")
}

func render(n Node) string {
	switch x := n.(type) {
	case And:
		return "(" + render(x.Left) + " and " + render(x.Right) + ")"
	case Or:
		return "(" + render(x.Left) + " or " + render(x.Right) + ")"
	case Not:
		return "not " + render(x.X)
	case Const:
		return strconv.FormatBool(x.Value)
	case Compare:
		field := x.Field
		if x.Set != SetNone {
			field = x.Set + "(" + x.Field + ")"
		}
		not := ""
		if x.Negate {
			not = "not "
		}
		switch x.Op {
		case "null":
			if x.Negate {
				return field + " is not null"
			}
			return field + " is null"
		case "in":
			vals := make([]string, len(x.Values))
			for i, v := range x.Values {
				vals[i] = v.String()
			}
			return field + " " + not + "in [" + strings.Join(vals, ", ") + "]"
		case "between":
			return field + " " + not + "between " + x.Values[0].String() + " and " + x.Values[1].String()
		}
		return field + " " + not + x.Op + " " + x.Values[0].String()
	}
	return ""
}
