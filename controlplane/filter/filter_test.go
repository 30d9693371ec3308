package filter

import (
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// identity is the test record: an identity as the identities list sees it.
type identity struct {
	id             string
	name           string // "" is absent
	isAdmin        bool
	createdAt      time.Time
	roleAttributes []string // nil is null, as opposed to empty
	location       string   // tags.location; "" is absent
	loginCount     float64
}

func (i identity) Field(name string) (Value, bool) {
	switch name {
	case "id":
		return String(i.id), true
	case "name":
		if i.name == "" {
			return Value{}, false
		}
		return String(i.name), true
	case "isAdmin":
		return Bool(i.isAdmin), true
	case "createdAt":
		return Time(i.createdAt), true
	case "roleAttributes":
		if i.roleAttributes == nil {
			return Null(), true
		}
		return Strings(i.roleAttributes), true
	case "tags.location":
		if i.location == "" {
			return Value{}, false
		}
		return String(i.location), true
	case "loginCount":
		return Number(i.loginCount), true
	}
	return Value{}, false
}

func day(y int, m time.Month, d int) time.Time { return time.Date(y, m, d, 0, 0, 0, 0, time.UTC) }

func identities() []identity {
	return []identity{
		{"1", "alice", true, day(2024, 1, 1), []string{"ops", "eu"}, "berlin", 10},
		{"2", "Bob", false, day(2024, 2, 1), []string{"dev"}, "paris", 2.5},
		{"3", "carol", false, day(2024, 3, 1), []string{}, "", 0},
		{"4", "", true, day(2023, 12, 31), nil, "Berlin", -1},
		{"5", "alice", false, day(2024, 1, 1), []string{"ops"}, "berlin", 10},
		{"6", "ÅSA", false, time.Date(2024, 4, 1, 12, 0, 0, 0, time.FixedZone("", 2*3600)), []string{"eu", "dev"}, "oslo", 7},
	}
}

func identitySchema() map[string]Kind {
	return map[string]Kind{
		"id":             KindString,
		"name":           KindString,
		"isAdmin":        KindBool,
		"createdAt":      KindTime,
		"roleAttributes": KindStringList,
		"tags.location":  KindString,
		"loginCount":     KindNumber,
	}
}

func ids(rs []identity) string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.id
	}
	return strings.Join(out, ",")
}

func ptr(n int) *int { return &n }

func cmpOf(field string, op Op, vs ...Value) Comparison {
	return Comparison{Field: field, Op: op, Values: vs}
}

func negated(c Comparison) Comparison { c.Negated = true; return c }

func withSet(s SetFunc, c Comparison) Comparison { c.Set = s; return c }

func TestParse(t *testing.T) {
	t.Parallel()
	plus1 := time.FixedZone("", 3600)
	tests := []struct {
		in   string
		want *Query
	}{
		{"", &Query{}},
		{" \t\r\n ", &Query{}},
		{"true", &Query{Expr: BoolExpr{true}}},
		{"FALSE", &Query{Expr: BoolExpr{false}}},
		{`name = "x"`, &Query{Expr: cmpOf("name", OpEq, String("x"))}},
		{`name="x"`, &Query{Expr: cmpOf("name", OpEq, String("x"))}},
		{`Name != ""`, &Query{Expr: cmpOf("Name", OpNe, String(""))}},
		{`n < 1`, &Query{Expr: cmpOf("n", OpLt, Number(1))}},
		{`n > -2.5`, &Query{Expr: cmpOf("n", OpGt, Number(-2.5))}},
		{`n <= 15e-10`, &Query{Expr: cmpOf("n", OpLe, Number(15e-10))}},
		{`n >= 1E3`, &Query{Expr: cmpOf("n", OpGe, Number(1000))}},
		{`n>=-0`, &Query{Expr: cmpOf("n", OpGe, Number(0))}},
		{`name contains "a"`, &Query{Expr: cmpOf("name", OpContains, String("a"))}},
		{`name ICONTAINS "a"`, &Query{Expr: cmpOf("name", OpIContains, String("a"))}},
		{`name startswith "a"`, &Query{Expr: cmpOf("name", OpStartsWith, String("a"))}},
		{`name endsWith "a"`, &Query{Expr: cmpOf("name", OpEndsWith, String("a"))}},
		{`name not contains "a"`, &Query{Expr: negated(cmpOf("name", OpContains, String("a")))}},
		{`name not icontains "a"`, &Query{Expr: negated(cmpOf("name", OpIContains, String("a")))}},
		{`name not startswith "a"`, &Query{Expr: negated(cmpOf("name", OpStartsWith, String("a")))}},
		{`name not endswith "a"`, &Query{Expr: negated(cmpOf("name", OpEndsWith, String("a")))}},
		{`id in ["a", "b"]`, &Query{Expr: cmpOf("id", OpIn, String("a"), String("b"))}},
		{`id in [ "a" ]`, &Query{Expr: cmpOf("id", OpIn, String("a"))}},
		{`n not in [1,2.5, -3]`, &Query{Expr: negated(cmpOf("n", OpIn, Number(1), Number(2.5), Number(-3)))}},
		{`b in [true, false]`, &Query{Expr: cmpOf("b", OpIn, Bool(true), Bool(false))}},
		{`n between 1 and 2`, &Query{Expr: cmpOf("n", OpBetween, Number(1), Number(2))}},
		{`s not between "a" and "b"`, &Query{Expr: negated(cmpOf("s", OpBetween, String("a"), String("b")))}},
		{`name is null`, &Query{Expr: cmpOf("name", OpIsNull)}},
		{`name IS NOT NULL`, &Query{Expr: negated(cmpOf("name", OpIsNull))}},
		{`name = null`, &Query{Expr: cmpOf("name", OpEq, Null())}},
		{`name != null`, &Query{Expr: cmpOf("name", OpNe, Null())}},
		{`isAdmin = true`, &Query{Expr: cmpOf("isAdmin", OpEq, Bool(true))}},
		{`isAdmin = False`, &Query{Expr: cmpOf("isAdmin", OpEq, Bool(false))}},
		{`createdAt = datetime(2024-01-02T03:04:05Z)`,
			&Query{Expr: cmpOf("createdAt", OpEq, Time(time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)))}},
		{`createdAt > DateTime ( 2024-01-02T03:04:05.5+01:00 )`,
			&Query{Expr: cmpOf("createdAt", OpGt, Time(time.Date(2024, 1, 2, 3, 4, 5, 5e8, plus1)))}},
		{`t between datetime(2024-01-01T00:00:00Z) and datetime(2025-01-01T00:00:00Z)`,
			&Query{Expr: cmpOf("t", OpBetween, Time(day(2024, 1, 1)), Time(day(2025, 1, 1)))}},
		{`name = "a\"b\\c\nd\te\rf\u00e9\u0001g"`, &Query{Expr: cmpOf("name", OpEq, String("a\"b\\c\nd\te\rf\u00e9\x01g"))}},
		{`name = "日本"`, &Query{Expr: cmpOf("name", OpEq, String("日本"))}},
		{`tags.location = "x"`, &Query{Expr: cmpOf("tags.location", OpEq, String("x"))}},
		{`_a.b_2.C = 1`, &Query{Expr: cmpOf("_a.b_2.C", OpEq, Number(1))}},
		{`anyOf(roleAttributes) = "x"`, &Query{Expr: withSet(SetAnyOf, cmpOf("roleAttributes", OpEq, String("x")))}},
		{`ALLOF ( roleAttributes ) != "y"`, &Query{Expr: withSet(SetAllOf, cmpOf("roleAttributes", OpNe, String("y")))}},
		{`anyOf(r) not in ["a"]`, &Query{Expr: withSet(SetAnyOf, negated(cmpOf("r", OpIn, String("a"))))}},
		{`a=1 and b=2`, &Query{Expr: AndExpr{cmpOf("a", OpEq, Number(1)), cmpOf("b", OpEq, Number(2))}}},
		{`a=1 or b=2`, &Query{Expr: OrExpr{cmpOf("a", OpEq, Number(1)), cmpOf("b", OpEq, Number(2))}}},
		{`not a=1`, &Query{Expr: NotExpr{cmpOf("a", OpEq, Number(1))}}},
		{`(not a=1)`, &Query{Expr: NotExpr{cmpOf("a", OpEq, Number(1))}}},
		{`not (true)`, &Query{Expr: NotExpr{BoolExpr{true}}}},
		{`sort by name`, &Query{Sort: []SortField{{"name", false}}}},
		{`SORT BY name ASC, createdAt DESC,id`, &Query{Sort: []SortField{{"name", false}, {"createdAt", true}, {"id", false}}}},
		{`skip 10`, &Query{Skip: ptr(10)}},
		{`limit 5`, &Query{Limit: ptr(5)}},
		{`limit 0`, &Query{Limit: ptr(0)}},
		{`limit none`, &Query{LimitNone: true}},
		{`sort by name desc skip 0 limit none`, &Query{Sort: []SortField{{"name", true}}, Skip: ptr(0), LimitNone: true}},
		{`true limit 3`, &Query{Expr: BoolExpr{true}, Limit: ptr(3)}},
		{`(a=1) sort by a skip 2 limit 3`,
			&Query{Expr: cmpOf("a", OpEq, Number(1)), Sort: []SortField{{"a", false}}, Skip: ptr(2), Limit: ptr(3)}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			got, err := Parse(tt.in)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.in, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Parse(%q)\n got  %#v\n want %#v", tt.in, got, tt.want)
			}
			checkRoundTrip(t, tt.in)
		})
	}
}

// fullParens prints e with every operation in parentheses.
func fullParens(e Expr) string {
	switch e := e.(type) {
	case NotExpr:
		return "(not " + fullParens(e.X) + ")"
	case AndExpr:
		return "(" + fullParens(e.X) + " and " + fullParens(e.Y) + ")"
	case OrExpr:
		return "(" + fullParens(e.X) + " or " + fullParens(e.Y) + ")"
	}
	return e.String()
}

func TestPrecedence(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{`a=1 or b=2 and c=3`, `(a=1 or (b=2 and c=3))`},
		{`a=1 and b=2 or c=3`, `((a=1 and b=2) or c=3)`},
		{`a=1 or b=2 or c=3`, `((a=1 or b=2) or c=3)`},
		{`a=1 and b=2 and c=3`, `((a=1 and b=2) and c=3)`},
		{`not a=1 and b=2`, `((not a=1) and b=2)`},
		{`not a=1 or b=2`, `((not a=1) or b=2)`},
		{`NOT A=1 OR B=2`, `((not A=1) or B=2)`},
		{`not (a=1 and b=2)`, `(not (a=1 and b=2))`},
		{`not not a=1`, `(not (not a=1))`},
		{`a=1 or not b=2 and c=3`, `(a=1 or ((not b=2) and c=3))`},
		{`(a=1 or b=2) and c=3`, `((a=1 or b=2) and c=3)`},
		{`a=1 and (b=2 or c=3)`, `(a=1 and (b=2 or c=3))`},
		{`a=1 and (b=2 and c=3)`, `(a=1 and (b=2 and c=3))`},
		{`true or false and false`, `(true or (false and false))`},
		{`x between 1 and 2 and y=1`, `(x between 1 and 2 and y=1)`},
		{`x not between 1 and 2 or y between 3 and 4 and z=1`, `(x not between 1 and 2 or (y between 3 and 4 and z=1))`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			q, err := Parse(tt.in)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.in, err)
			}
			if got := fullParens(q.Expr); got != tt.want {
				t.Errorf("Parse(%q) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
}

func TestString(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{``, ``},
		{`name = "x" and (isAdmin = true or anyOf(roleAttributes) in ["a", "b"]) sort by name desc, createdAt asc limit 5`,
			`name="x" and (isAdmin=true or anyOf(roleAttributes) in ["a","b"]) sort by name desc,createdAt limit 5`},
		{`((a = 1))`, `a=1`},
		{`(a=1 and b=2) and c=3`, `a=1 and b=2 and c=3`},
		{`a=1 and (b=2 and c=3)`, `a=1 and (b=2 and c=3)`},
		{`a=1 or (b=2 and c=3)`, `a=1 or b=2 and c=3`},
		{`(a=1 or b=2) and c=3`, `(a=1 or b=2) and c=3`},
		{`not (not (a=1))`, `not not a=1`},
		{`NOT (a = 1 OR b = 2)`, `not (a=1 or b=2)`},
		{`not (true)`, `not true`},
		{`n = 1.50`, `n=1.5`},
		{`n = 007`, `n=7`},
		{`n = -0.0`, `n=-0`},
		{`n = 1e3`, `n=1e3`},
		{`n = 1000`, `n=1e3`},
		{`n = 1500`, `n=1500`},
		{`n = 0.001`, `n=1e-3`},
		{`n = 10000`, `n=1e4`},
		{`n = 99999999999999999`, `n=1e17`},
		{`n = 0.00000001`, `n=1e-8`},
		{`n = 1.5e-9`, `n=15e-10`},
		{`n = 123456789012345678901`, `n=12345678901234568e4`},
		{`n = 1e-400`, `n=0`},
		{`s = "tab\there"`, `s="tab\there"`},
		{`s = "\u0041\u000a\u001F"`, `s="A\n\u001f"`},
		{`s = "é\"\\"`, `s="é\"\\"`},
		{`d = datetime(2024-01-02T03:04:05.000+00:00)`, `d=datetime(2024-01-02T03:04:05Z)`},
		{`d = datetime(2024-01-02T03:04:05.120-02:30)`, `d=datetime(2024-01-02T03:04:05.12-02:30)`},
		{`x IS NOT NULL`, `x is not null`},
		{`x Not In [1, 2]`, `x not in [1,2]`},
		{`x between "a" and "b"`, `x between "a" and "b"`},
		{`allOf(r) not startswith "x"`, `allOf(r) not startswith "x"`},
		{`skip 007 LIMIT NONE`, `skip 7 limit none`},
		{`sort by a ASC`, `sort by a`},
		{`sort by a desc limit 0`, `sort by a desc limit 0`},
		{`false skip 1`, `false skip 1`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			q, err := Parse(tt.in)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.in, err)
			}
			if got := q.String(); got != tt.want {
				t.Errorf("Parse(%q).String() = %s, want %s", tt.in, got, tt.want)
			}
			checkRoundTrip(t, tt.in)
		})
	}
}

// checkRoundTrip checks what FuzzParse checks: if s parses, its canonical form is no
// longer than s and parses to an equal query with the same canonical form.
func checkRoundTrip(t *testing.T, s string) {
	t.Helper()
	q, err := Parse(s)
	if err != nil {
		var se *SyntaxError
		if !errors.As(err, &se) {
			t.Fatalf("Parse(%q) error %v is %T, not *SyntaxError", s, err, err)
		}
		if se.Offset < 0 || se.Offset > len(s) {
			t.Fatalf("Parse(%q) error offset %d outside the input", s, se.Offset)
		}
		return
	}
	canon := q.String()
	if len(canon) > len(s) {
		t.Fatalf("canonical form %q is longer than the input %q", canon, s)
	}
	q2, err := Parse(canon)
	if err != nil {
		t.Fatalf("Parse(%q) = %v, which reads back from %q with error %v", s, canon, canon, err)
	}
	if got := q2.String(); got != canon {
		t.Fatalf("canonical form of %q is %q, but that reads back as %q", s, canon, got)
	}
	if !reflect.DeepEqual(q, q2) {
		t.Fatalf("Parse(%q) = %#v, but its canonical form %q reads back as %#v", s, q, canon, q2)
	}
}

type errorCase struct{ in, want string }

// syntaxErrorCases are filters that do not parse, with their exact errors.
func syntaxErrorCases() []errorCase {
	return []errorCase{
		{`name`, `at offset 4: expected an operator after "name", found end of input`},
		{`name =`, `at offset 6: expected a value after "=", found end of input`},
		{`=1`, `at offset 0: expected a field, "(", "not", "true" or "false", found "="`},
		{`)`, `at offset 0: expected a field, "(", "not", "true" or "false", found ")"`},
		{`name = "x" )`, `at offset 11: expected "and", "or", "sort by", "skip", "limit" or end of input, found ")"`},
		{`(name = "x"`, `at offset 11: expected "and", "or" or ")", found end of input`},
		{`name = "x" and`, `at offset 14: expected a field, "(", "not", "true" or "false", found end of input`},
		{`name = "x" or`, `at offset 13: expected a field, "(", "not", "true" or "false", found end of input`},
		{`name = "x" xor y = 1`, `at offset 11: expected "and", "or", "sort by", "skip", "limit" or end of input, found "xor"`},
		{`name == "x"`, `at offset 6: expected a value after "=", found "="`},
		{`name ! "x"`, `at offset 5: unexpected character "!"; the inequality operator is "!=", negation is "not"`},
		{`name = 'x'`, `at offset 7: unexpected character "'"; strings are written in double quotes`},
		{`name = "a\qb"`, `at offset 9: invalid escape \q in string; the escapes are \", \\, \n, \r, \t and \uXXXX`},
		{`name = "a\u12"`, `at offset 9: invalid escape \u12 in string; \u takes four hexadecimal digits of a character outside U+D800 to U+DFFF`},
		{`name = "a\ud800"`, `at offset 9: invalid escape \ud800 in string; \u takes four hexadecimal digits of a character outside U+D800 to U+DFFF`},
		{"name = \"a\tb\"", `at offset 9: control character U+0009 in string; write it as an escape: \n, \r, \t or \uXXXX`},
		{`name = "abc`, `at offset 7: unterminated string; expected a closing " before the end of input`},
		{`name = "abc\`, `at offset 11: unterminated escape at the end of input`},
		{`name = -x`, `at offset 7: expected a digit after "-"`},
		{`name = 1.`, `at offset 7: malformed number "1."`},
		{`name = 1e`, `at offset 7: malformed number "1e"`},
		{`name = 1.2.3`, `at offset 7: malformed number "1.2.3"`},
		{`name = 5and x = 1`, `at offset 7: malformed number "5and"`},
		{`name = 1e999`, `at offset 7: number 1e999 is out of range`},
		{`name = @`, `at offset 7: unexpected character "@"`},
		{`name = ä`, `at offset 7: unexpected character "ä"`},
		{`name ~ 1`, `at offset 5: unexpected character "~"`},
		{`name = "x" && y = 1`, `at offset 11: unexpected character "&"; conjunction is "and"`},
		{`name = "x" || y = 1`, `at offset 11: unexpected character "|"; disjunction is "or"`},
		{"name = \"\xff\"", `at offset 8: invalid UTF-8`},
		{`name contains 5`, `at offset 14: expected a string after "contains", found number 5`},
		{`name not icontains null`, `at offset 19: expected a string after "not icontains", found "null"`},
		{`name < null`, `at offset 7: expected a string, number or datetime after "<", found "null"`},
		{`isAdmin >= true`, `at offset 11: expected a string, number or datetime after ">=", found "true"`},
		{`name not = "x"`, `at offset 9: expected "contains", "icontains", "startswith", "endswith", "in" or "between" after "not", found "="`},
		{`name not`, `at offset 8: expected "contains", "icontains", "startswith", "endswith", "in" or "between" after "not", found end of input`},
		{`name is`, `at offset 7: expected "null" or "not null" after "is", found end of input`},
		{`name is not`, `at offset 11: expected "null" after "is not", found end of input`},
		{`name is "x"`, `at offset 8: expected "null" or "not null" after "is", found string "x"`},
		{`name in "x"`, `at offset 8: expected "[" after "in", found string "x"`},
		{`name not in ("x")`, `at offset 12: expected "[" after "not in", found "("`},
		{`name in ["a" "b"]`, `at offset 13: expected "," or "]" in "in" list, found string "b"`},
		{`name in ["a",`, `at offset 13: expected a string, number, boolean or datetime in "in" list, found end of input`},
		{`name in []`, `at offset 9: expected a string, number, boolean or datetime in "in" list, found "]"`},
		{`name in [null]`, `at offset 9: expected a string, number, boolean or datetime in "in" list, found "null"`},
		{`name in ["a", 1]`, `at offset 14: the values of an "in" list must be of one kind, found string and number`},
		{`name between 1`, `at offset 14: expected "and" after the lower bound of "between", found end of input`},
		{`name between 1 or 2`, `at offset 15: expected "and" after the lower bound of "between", found "or"`},
		{`name between 1 and "z"`, `at offset 19: the bounds of "between" must be of one kind, found number and string`},
		{`name between true and false`, `at offset 13: expected a string, number or datetime after "between", found "true"`},
		{`anyOf name = 1`, `at offset 6: expected "(" after "anyOf", found "name"`},
		{`anyOf(name = 1`, `at offset 11: expected ")" after anyOf(name, found "="`},
		{`allOf(1) = 1`, `at offset 6: expected a list field inside allOf(...), found number 1`},
		{`anyOf() = 1`, `at offset 6: expected a list field inside anyOf(...), found ")"`},
		{`anyOf(x)`, `at offset 8: expected an operator after "anyOf(x)", found end of input`},
		{`limit = 1`, `at offset 6: expected a non-negative integer or "none" after "limit", found "="`},
		{`sort`, `at offset 4: expected "by" after "sort", found end of input`},
		{`sort name`, `at offset 5: expected "by" after "sort", found "name"`},
		{`sort by`, `at offset 7: expected a field to sort by, found end of input`},
		{`sort by name,`, `at offset 13: expected a field to sort by, found end of input`},
		{`sort by "name"`, `at offset 8: expected a field to sort by, found string "name"`},
		{`sort by limit`, `at offset 8: expected a field to sort by, found "limit"`},
		{`sort by name limit`, `at offset 18: expected a non-negative integer or "none" after "limit", found end of input`},
		{`limit -1`, `at offset 6: expected a non-negative integer or "none" after "limit", found number -1`},
		{`limit 1.5`, `at offset 6: expected a non-negative integer or "none" after "limit", found number 1.5`},
		{`limit 99999999999999999999999`, `at offset 6: limit 99999999999999999999999 is too large`},
		{`limit x`, `at offset 6: expected a non-negative integer or "none" after "limit", found "x"`},
		{`skip none`, `at offset 5: expected a non-negative integer after "skip", found "none"`},
		{`skip 1 sort by name`, `at offset 7: expected "limit" or end of input, found "sort"`},
		{`limit 1 limit 2`, `at offset 8: expected end of input, found "limit"`},
		{`limit 1 skip 2`, `at offset 8: expected end of input, found "skip"`},
		{`sort by name sort by id`, `at offset 13: expected ",", "skip", "limit" or end of input, found "sort"`},
		{`name = "x" sort by name desc asc`, `at offset 29: expected ",", "skip", "limit" or end of input, found "asc"`},
		{`datetime = 1`, `at offset 9: expected "(" after "datetime", found "="`},
		{`name = datetime`, `at offset 15: expected "(" after "datetime", found end of input`},
		{`name = datetime(2024`, `at offset 7: unterminated datetime; expected ")" before the end of input`},
		{`name = datetime(2024-13-01T00:00:00Z)`, `at offset 16: invalid datetime "2024-13-01T00:00:00Z"; expected an RFC 3339 time such as 2024-01-02T03:04:05Z`},
		{`name = datetime(2024-01-02T03:04:05,120-02:30)`, `at offset 16: invalid datetime "2024-01-02T03:04:05,120-02:30"; expected an RFC 3339 time such as 2024-01-02T03:04:05Z`},
		{`name = datetime(2024-01-02t03:04:05z)`, `at offset 16: invalid datetime "2024-01-02t03:04:05z"; expected an RFC 3339 time such as 2024-01-02T03:04:05Z`},
		// Found by FuzzParse: time.Parse takes a one-digit hour.
		{`A=dAtetime(0000-01-01T0:00:00Z)`, `at offset 11: invalid datetime "0000-01-01T0:00:00Z"; expected an RFC 3339 time such as 2024-01-02T03:04:05Z`},
		{`name = datetime(2024-01-02T03:04:05.Z)`, `at offset 16: invalid datetime "2024-01-02T03:04:05.Z"; expected an RFC 3339 time such as 2024-01-02T03:04:05Z`},
		{`name = datetime(2024-01-02T03:04:05+1:00)`, `at offset 16: invalid datetime "2024-01-02T03:04:05+1:00"; expected an RFC 3339 time such as 2024-01-02T03:04:05Z`},
		{`name = datetime( 2024-01-01 )`, `at offset 17: invalid datetime "2024-01-01"; expected an RFC 3339 time such as 2024-01-02T03:04:05Z`},
		{`not`, `at offset 3: expected a field, "(", "not", "true" or "false", found end of input`},
		{`not not`, `at offset 7: expected a field, "(", "not", "true" or "false", found end of input`},
		{`true false`, `at offset 5: expected "and", "or", "sort by", "skip", "limit" or end of input, found "false"`},
		{`name = true.x`, `at offset 7: expected a value after "=", found "true.x"`},
		{`tags..x = 1`, `at offset 0: malformed field name "tags..x"; expected names of letters, digits and _ joined by dots, each name starting with a letter or _`},
		{`tags. = 1`, `at offset 0: malformed field name "tags."; expected names of letters, digits and _ joined by dots, each name starting with a letter or _`},
		{`_x.1y = 1`, `at offset 0: malformed field name "_x.1y"; expected names of letters, digits and _ joined by dots, each name starting with a letter or _`},
		{`in = 1`, `at offset 0: expected a field, "(", "not", "true" or "false", found "in"`},
		{`name=1)`, `at offset 6: expected "and", "or", "sort by", "skip", "limit" or end of input, found ")"`},
		// Keyword operators stand between whitespace.
		{`not(a=1)`, `at offset 3: expected whitespace after "not", found "("`},
		{`a=1 and(b=1)`, `at offset 7: expected whitespace after "and", found "("`},
		{`(a=1)or b=1`, `at offset 5: expected whitespace before "or"`},
		{`a="x"and b=1`, `at offset 5: expected whitespace before "and"`},
		{`name in["a"]`, `at offset 7: expected whitespace after "in", found "["`},
		{`anyOf(r)contains "a"`, `at offset 8: expected whitespace before "contains"`},
		{`name contains"a"`, `at offset 13: expected whitespace after "contains", found string "a"`},
		{`n between 1 and(2)`, `at offset 15: expected whitespace after "and", found "("`},
		{`name = "x"sort by name`, `at offset 10: expected whitespace before "sort"`},
		{`a=1 limit 2skip 1`, `at offset 10: malformed number "2skip"`},
		{`name = "x"limit 1`, `at offset 10: expected whitespace before "limit"`},
	}
}

func TestSyntaxErrors(t *testing.T) {
	t.Parallel()
	for _, tt := range syntaxErrorCases() {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			q, err := Parse(tt.in)
			if err == nil {
				t.Fatalf("Parse(%q) = %s, want error %s", tt.in, q, tt.want)
			}
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("Parse(%q) error is %T, want *SyntaxError", tt.in, err)
			}
			if got := err.Error(); got != tt.want {
				t.Errorf("Parse(%q) error\n got  %s\n want %s", tt.in, got, tt.want)
			}
			if want := "at offset " + strconv.Itoa(se.Offset) + ": " + se.Msg; err.Error() != want {
				t.Errorf("Error() = %q, want %q", err.Error(), want)
			}
		})
	}
}

func TestLimits(t *testing.T) {
	t.Parallel()
	pad := func(n int) string { // a valid filter of n bytes
		return `name = "` + strings.Repeat("x", n-len(`name = ""`)) + `"`
	}
	list := func(n int) string {
		vs := make([]string, n)
		for i := range vs {
			vs[i] = strconv.Itoa(i)
		}
		return "n in [" + strings.Join(vs, ",") + "]"
	}
	parens := func(n int) string { return strings.Repeat("(", n) + "a=1" + strings.Repeat(")", n) }
	nots := func(n int) string { return strings.Repeat("not ", n) + "a=1" }
	mixed := func(n int) string { return strings.Repeat("not (", n) + "a=1" + strings.Repeat(")", n) }
	tests := []struct {
		name, in, want string // want "" for no error
	}{
		{"length at limit", pad(MaxLength), ""},
		{"length over limit", pad(MaxLength + 1), "at offset 4096: filter is longer than 4096 bytes"},
		{"parentheses at limit", parens(MaxDepth), ""},
		{"parentheses over limit", parens(MaxDepth + 1), `at offset 64: filter nests parentheses and "not" deeper than 64 levels`},
		{"nots at limit", nots(MaxDepth), ""},
		{"nots over limit", nots(MaxDepth + 1), `at offset 256: filter nests parentheses and "not" deeper than 64 levels`},
		{"mixed at limit", mixed(MaxDepth / 2), ""},
		{"mixed over limit", "not " + mixed(MaxDepth/2), `at offset 163: filter nests parentheses and "not" deeper than 64 levels`},
		{"sequential groups do not add up", strings.Repeat(parens(40)+" and ", 3) + "true", ""},
		{"list at limit", list(MaxList), ""},
		{"list over limit", list(MaxList + 1), `at offset 3896: "in" list has more than 1000 values`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse(tt.in)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Parse: %v", err)
			case tt.want != "" && err == nil:
				t.Fatalf("Parse succeeded, want %s", tt.want)
			case tt.want != "" && err.Error() != tt.want:
				t.Fatalf("Parse error\n got  %v\n want %s", err, tt.want)
			}
			checkRoundTrip(t, tt.in)
		})
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	const known = "known fields: createdAt, id, isAdmin, loginCount, name, roleAttributes, tags.location"
	tests := []struct {
		in, field, want string // want "" for valid
	}{
		{``, "", ""},
		{`true sort by name limit 1`, "", ""},
		{`name = "x" and isAdmin = true and loginCount > 1 and createdAt < datetime(2024-01-01T00:00:00Z)`, "", ""},
		{`name icontains "x" or name not startswith "y" or name endswith "z"`, "", ""},
		{`name between "a" and "m" and loginCount not between 1 and 2`, "", ""},
		{`id in ["1", "2"] and loginCount not in [1, 2] and isAdmin in [true]`, "", ""},
		{`name = null and isAdmin != null and createdAt is null and loginCount is not null`, "", ""},
		{`roleAttributes is null or roleAttributes = null or roleAttributes is not null`, "", ""},
		{`anyOf(roleAttributes) = "a" and allOf(roleAttributes) not contains "b" and anyOf(roleAttributes) < "c"`, "", ""},
		{`tags.location = "berlin" sort by tags.location desc, createdAt, isAdmin, loginCount`, "", ""},
		{`nme = "x"`, "nme", `unknown field "nme"; ` + known},
		{`name = "x" and (isAdmin = true or not Name = "y")`, "Name", `unknown field "Name"; ` + known},
		{`tags = "x"`, "tags", `unknown field "tags"; ` + known},
		{`anyOf(roles) = "x"`, "roles", `unknown field "roles"; ` + known},
		{`isAdmin contains "x"`, "isAdmin", `field "isAdmin" is a boolean; "contains" applies to strings`},
		{`loginCount not icontains "x"`, "loginCount", `field "loginCount" is a number; "not icontains" applies to strings`},
		{`createdAt startswith "2024"`, "createdAt", `field "createdAt" is a datetime; "startswith" applies to strings`},
		{`isAdmin < "x"`, "isAdmin", `field "isAdmin" is a boolean; "<" applies to strings, numbers and datetimes`},
		{`isAdmin not between 1 and 2`, "isAdmin", `field "isAdmin" is a boolean; "not between" applies to strings, numbers and datetimes`},
		{`name = 5`, "name", `field "name" is a string; cannot compare it with number 5`},
		{`name != true`, "name", `field "name" is a string; cannot compare it with true`},
		{`loginCount in ["a"]`, "loginCount", `field "loginCount" is a number; cannot compare it with string "a"`},
		{`createdAt > "2024"`, "createdAt", `field "createdAt" is a datetime; cannot compare it with string "2024"`},
		{`name = datetime(2024-01-01T00:00:00Z)`, "name", `field "name" is a string; cannot compare it with datetime(2024-01-01T00:00:00Z)`},
		{`isAdmin = 1`, "isAdmin", `field "isAdmin" is a boolean; cannot compare it with number 1`},
		{`roleAttributes = "x"`, "roleAttributes", `field "roleAttributes" is a list of strings; compare its elements with anyOf(roleAttributes) or allOf(roleAttributes)`},
		{`roleAttributes contains "x"`, "roleAttributes", `field "roleAttributes" is a list of strings; compare its elements with anyOf(roleAttributes) or allOf(roleAttributes)`},
		{`anyOf(name) = "x"`, "name", `field "name" is a string; anyOf applies to lists`},
		{`allOf(isAdmin) = true`, "isAdmin", `field "isAdmin" is a boolean; allOf applies to lists`},
		{`anyOf(roleAttributes) = 1`, "roleAttributes", `the elements of "roleAttributes" are strings; cannot compare them with number 1`},
		{`allOf(roleAttributes) is null`, "roleAttributes", `allOf(roleAttributes) compares the elements of "roleAttributes", which are never null; test the list itself, as in roleAttributes is null`},
		{`anyOf(roleAttributes) != null`, "roleAttributes", `anyOf(roleAttributes) compares the elements of "roleAttributes", which are never null; test the list itself, as in roleAttributes is null`},
		{`sort by nme`, "nme", `unknown field "nme"; ` + known},
		{`name = "x" sort by name, roleAttributes desc`, "roleAttributes", `cannot sort by "roleAttributes": it is a list of strings`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			q, err := Parse(tt.in)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.in, err)
			}
			err = q.Validate(identitySchema())
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate(%q): %v", tt.in, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate(%q) succeeded, want %s", tt.in, tt.want)
			}
			if err.Error() != tt.want {
				t.Errorf("Validate(%q)\n got  %v\n want %s", tt.in, err, tt.want)
			}
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tt.field {
				t.Errorf("Validate(%q) error %#v, want *FieldError for field %q", tt.in, err, tt.field)
			}
		})
	}
}

func TestValidateSchemaEdges(t *testing.T) {
	t.Parallel()
	q, err := Parse(`x = 1`)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Validate(nil); err == nil || err.Error() != `unknown field "x"; no fields are known` {
		t.Errorf("Validate(nil) = %v", err)
	}
	if err := q.Validate(map[string]Kind{"x": KindNull}); err == nil || err.Error() != `field "x" has no valid kind in the schema (null)` {
		t.Errorf("Validate with a null kind = %v", err)
	}
	var nilQuery *Query
	if err := nilQuery.Validate(nil); err != nil {
		t.Errorf("nil query: Validate = %v", err)
	}
}

func TestMatch(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{``, "1,2,3,4,5,6"},
		{`true`, "1,2,3,4,5,6"},
		{`false`, ""},
		{`not false`, "1,2,3,4,5,6"},
		{`name = "alice"`, "1,5"},
		{`name = "Alice"`, ""},
		// != is the negation of =: true for a record without the field.
		{`name != "alice"`, "2,3,4,6"},
		{`not name = "alice"`, "2,3,4,6"},
		{`name = null`, "4"},
		{`name is null`, "4"},
		{`name != null`, "1,2,3,5,6"},
		{`name is not null`, "1,2,3,5,6"},
		// Other comparisons with a null field are false, their negations true.
		{`name < "b"`, "1,2,5"},
		{`not name < "b"`, "3,4,6"},
		{`name >= "b"`, "3,6"},
		{`name contains "li"`, "1,5"},
		{`name not contains "li"`, "2,3,4,6"},
		{`name contains ""`, "1,2,3,5,6"},
		{`name icontains "LI"`, "1,5"},
		{`name icontains "åsa"`, "6"},
		{`name contains "åsa"`, ""},
		{`name not icontains "b"`, "1,3,4,5,6"},
		{`name startswith "a"`, "1,5"},
		{`name not startswith "a"`, "2,3,4,6"},
		{`name endswith "ol"`, "3"},
		{`name not endswith "ol"`, "1,2,4,5,6"},
		{`name in ["Bob", "carol"]`, "2,3"},
		{`name not in ["Bob", "carol"]`, "1,4,5,6"},
		{`name between "a" and "b"`, "1,5"},
		{`loginCount = 2.5`, "2"},
		{`loginCount >= 10`, "1,5"},
		{`loginCount > 7`, "1,5"},
		{`loginCount <= -1`, "4"},
		{`loginCount < 0`, "4"},
		{`loginCount between 0 and 7`, "2,3,6"},
		{`loginCount not between 0 and 7`, "1,4,5"},
		{`loginCount in [0, 7]`, "3,6"},
		{`createdAt < datetime(2024-01-01T00:00:00Z)`, "4"},
		{`createdAt = datetime(2024-01-01T01:00:00+01:00)`, "1,5"},
		{`createdAt between datetime(2024-01-15T00:00:00Z) and datetime(2024-03-01T00:00:00Z)`, "2,3"},
		{`createdAt > datetime(2024-04-01T09:00:00Z)`, "6"},
		{`createdAt >= datetime(2024-04-01T10:00:00.000Z)`, "6"},
		{`createdAt > datetime(2024-04-01T10:00:00Z)`, ""},
		{`isAdmin = true`, "1,4"},
		{`isAdmin != true`, "2,3,5,6"},
		{`isAdmin in [false]`, "2,3,5,6"},
		{`anyOf(roleAttributes) = "ops"`, "1,5"},
		// allOf holds for an empty or null list.
		{`allOf(roleAttributes) = "ops"`, "3,4,5"},
		{`anyOf(roleAttributes) != "ops"`, "1,2,6"},
		{`allOf(roleAttributes) != "ops"`, "2,3,4,6"},
		{`anyOf(roleAttributes) in ["dev", "eu"]`, "1,2,6"},
		{`allOf(roleAttributes) in ["dev", "eu"]`, "2,3,4,6"},
		{`anyOf(roleAttributes) not in ["dev", "eu"]`, "1,5"},
		{`anyOf(roleAttributes) startswith "d"`, "2,6"},
		{`anyOf(roleAttributes) icontains "EU"`, "1,6"},
		{`anyOf(roleAttributes) < "e"`, "2,6"},
		{`roleAttributes is null`, "4"},
		{`roleAttributes is not null`, "1,2,3,5,6"},
		{`tags.location = "berlin"`, "1,5"},
		{`tags.location icontains "BERLIN"`, "1,4,5"},
		{`tags.location is null`, "3"},
		{`tags.location != "berlin"`, "2,3,4,6"},
		{`noSuchField is null`, "1,2,3,4,5,6"},
		{`isAdmin = true or name = "carol" and loginCount > 0`, "1,4"},
		{`(isAdmin = true or name = "carol") and loginCount >= 0`, "1,3"},
		{`not (isAdmin = true or anyOf(roleAttributes) = "dev")`, "3,5"},
		{`not not isAdmin = true`, "1,4"},
		{`name = "alice" and not isAdmin = true`, "5"},
		// Comparisons with values of another kind are false without Validate.
		{`name = 5`, ""},
		{`name != 5`, "1,2,3,4,5,6"},
		{`loginCount < "z"`, ""},
		{`isAdmin contains "t"`, ""},
		// The trailing clauses do not filter.
		{`name = "alice" sort by id limit 1`, "1,5"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			q, err := Parse(tt.in)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.in, err)
			}
			var got []identity
			for _, r := range identities() {
				if q.Match(r) {
					got = append(got, r)
				}
			}
			if ids(got) != tt.want {
				t.Errorf("%s matched %q, want %q", tt.in, ids(got), tt.want)
			}
		})
	}
}

func TestMatchFields(t *testing.T) {
	t.Parallel()
	r := Fields{"name": String("x"), "n": Number(1), "tags": Strings([]string{"a"}), "z": Null()}
	tests := []struct {
		in   string
		want bool
	}{
		{`name = "x"`, true},
		{`n = 1.0`, true},
		{`anyOf(tags) = "a"`, true},
		{`z is null`, true},
		{`z = null`, true},
		{`missing is null`, true},
		{`missing = "x"`, false},
		{`anyOf(name) = "x"`, true}, // a single value is a list of one
		{`allOf(missing) = "x"`, true},
		{`anyOf(missing) = "x"`, false},
		{`tags = "a"`, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			q, err := Parse(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if got := q.Match(r); got != tt.want {
				t.Errorf("Match(%s) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
	var nilQuery *Query
	if !nilQuery.Match(r) || nilQuery.Compare(r, r) != 0 || nilQuery.String() != "" {
		t.Error("nil query is not the query that matches all")
	}
}

func TestCompare(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{``, "1,2,3,4,5,6"},
		// Absent fields first; bytes order puts upper case first; ties keep their order.
		{`sort by name`, "4,2,1,5,3,6"},
		{`sort by name desc`, "6,3,1,5,2,4"},
		{`sort by name, loginCount desc, id desc`, "4,2,5,1,3,6"},
		{`sort by createdAt desc, id`, "6,3,2,1,5,4"},
		{`sort by isAdmin, name desc`, "6,3,5,2,1,4"},
		{`sort by tags.location`, "3,4,1,5,6,2"},
		{`sort by loginCount`, "4,3,2,6,1,5"},
		{`sort by noSuchField`, "1,2,3,4,5,6"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			q, err := Parse(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			rs := identities()
			slices.SortStableFunc(rs, func(a, b identity) int { return q.Compare(a, b) })
			if ids(rs) != tt.want {
				t.Errorf("%s sorted %q, want %q", tt.in, ids(rs), tt.want)
			}
		})
	}
	q, err := Parse(`sort by name, createdAt`)
	if err != nil {
		t.Fatal(err)
	}
	rs := identities()
	if c := q.Compare(rs[0], rs[4]); c != 0 {
		t.Errorf("Compare of a tie = %d, want 0", c)
	}
	if c, d := q.Compare(rs[0], rs[1]), q.Compare(rs[1], rs[0]); c <= 0 || d >= 0 {
		t.Errorf("Compare(alice, Bob) = %d, Compare(Bob, alice) = %d", c, d)
	}
}

func TestCompareKinds(t *testing.T) {
	t.Parallel()
	q := &Query{Sort: []SortField{{Field: "v"}}}
	ordered := []Value{
		Null(), String("a"), String("b"), Number(-1), Number(2), Bool(false), Bool(true),
		Time(day(2024, 1, 1)), Time(day(2025, 1, 1)), Strings(nil), Strings([]string{"a"}), Strings([]string{"a", "b"}),
	}
	for i, a := range ordered {
		for j, b := range ordered {
			c := q.Compare(Fields{"v": a}, Fields{"v": b})
			if want := cmpInt(i, j); c != want {
				t.Errorf("Compare(%v, %v) = %d, want %d", a, b, c, want)
			}
		}
	}
}

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func TestValueString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		v    Value
		kind Kind
		want string
	}{
		{Null(), KindNull, "null"},
		{Value{}, KindNull, "null"},
		{String("a\"b"), KindString, `"a\"b"`},
		{Number(0.1), KindNumber, "0.1"},
		{Number(1e100), KindNumber, "1e100"},
		{Bool(true), KindBool, "true"},
		{Time(time.Date(2024, 1, 2, 3, 4, 5, 6, time.UTC)), KindTime, "datetime(2024-01-02T03:04:05.000000006Z)"},
		{Strings([]string{"a", "b"}), KindStringList, `["a","b"]`},
	}
	for _, tt := range tests {
		if tt.v.Kind() != tt.kind || tt.v.String() != tt.want {
			t.Errorf("%#v: kind %v, string %s; want %v, %s", tt.v, tt.v.Kind(), tt.v.String(), tt.kind, tt.want)
		}
	}
}

// TestBuiltQuery checks that a query built in code prints in a form that parses back.
func TestBuiltQuery(t *testing.T) {
	t.Parallel()
	q := &Query{
		Expr: OrExpr{
			X: AndExpr{X: cmpOf("a", OpEq, String("x\x00y")), Y: OrExpr{X: BoolExpr{true}, Y: NotExpr{X: cmpOf("b", OpIsNull)}}},
			Y: OrExpr{X: withSet(SetAllOf, negated(cmpOf("c", OpBetween, Number(1), Number(2)))), Y: cmpOf("d", OpIn, Bool(true))},
		},
		Sort:  []SortField{{"a", true}, {"b", false}},
		Limit: ptr(3),
	}
	const want = `a="x\u0000y" and (true or not b is null) or (allOf(c) not between 1 and 2 or d in [true]) sort by a desc,b limit 3`
	if got := q.String(); got != want {
		t.Fatalf("String() = %s\nwant %s", got, want)
	}
	back, err := Parse(want)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, q) {
		t.Errorf("Parse(%s) = %#v, want %#v", want, back, q)
	}
}

func BenchmarkMatch(b *testing.B) {
	q, err := Parse(`(name icontains "LI" and isAdmin = false or anyOf(roleAttributes) in ["dev", "eu"]) and createdAt > datetime(2023-06-01T00:00:00Z) and tags.location != "paris"`)
	if err != nil {
		b.Fatal(err)
	}
	rs := identities()
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		for _, r := range rs {
			if q.Match(r) {
				n++
			}
		}
	}
	if n == 0 {
		b.Fatal("no record matched")
	}
}

func BenchmarkParse(b *testing.B) {
	const s = `name = "x" and (isAdmin = true or anyOf(roleAttributes) in ["a", "b"]) and createdAt > datetime(2024-01-02T03:04:05Z) sort by name desc, createdAt limit 5`
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(s); err != nil {
			b.Fatal(err)
		}
	}
}
