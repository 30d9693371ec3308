// Package query parses and evaluates the query language API clients pass in the filter
// parameter of list operations: comparisons joined by and, or and not, set functions over
// list fields, and trailing sort by, skip and limit clauses. Parse turns text into a Query,
// Validate checks it against the fields of one entity type, Match and Compare apply it.
package query

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// Limits on what one filter may hold.
const (
	MaxLength = 4096 // bytes of filter text
	MaxDepth  = 64   // nesting of parentheses and not
	MaxList   = 1000 // values of an in list
)

// SyntaxError is a filter that does not parse; Offset is where, in bytes.
type SyntaxError struct {
	Offset int
	Msg    string
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("at offset %d: %s", e.Offset, e.Msg) }

type tokenKind int

const (
	tEOF tokenKind = iota
	tIdent
	tString
	tNumber
	tDatetime
	tLParen
	tRParen
	tLBracket
	tRBracket
	tComma
	tOp // = != < > <= >=
)

type token struct {
	kind tokenKind
	text string // identifiers and operators as written; strings unquoted
	num  float64
	pos  int
}

// describe names a token for error messages.
func (t token) describe() string {
	switch t.kind {
	case tEOF:
		return "the end of the filter"
	case tString:
		return strconv.Quote(t.text)
	case tDatetime:
		return "datetime(" + t.text + ")"
	}
	return fmt.Sprintf("%q", t.text)
}

// lex splits the filter into tokens.
func lex(s string) ([]token, error) {
	var out []token
	i := 0
	for i < len(s) {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '(':
			out = append(out, token{kind: tLParen, text: "(", pos: i})
			i++
		case c == ')':
			out = append(out, token{kind: tRParen, text: ")", pos: i})
			i++
		case c == '[':
			out = append(out, token{kind: tLBracket, text: "[", pos: i})
			i++
		case c == ']':
			out = append(out, token{kind: tRBracket, text: "]", pos: i})
			i++
		case c == ',':
			out = append(out, token{kind: tComma, text: ",", pos: i})
			i++
		case c == '=':
			out = append(out, token{kind: tOp, text: "=", pos: i})
			i++
		case c == '!' || c == '<' || c == '>':
			op := string(c)
			if i+1 < len(s) && s[i+1] == '=' {
				op += "="
			} else if c == '!' {
				return nil, &SyntaxError{i, `"!" must be followed by "=" (write != or not)`}
			}
			out = append(out, token{kind: tOp, text: op, pos: i})
			i += len(op)
		case c == '"':
			j := i + 1
			for j < len(s) && s[j] != '"' {
				if s[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(s) {
				return nil, &SyntaxError{i, "the string is not closed with a double quote"}
			}
			text, err := strconv.Unquote(s[i : j+1])
			if err != nil {
				return nil, &SyntaxError{i, "the string has an invalid escape sequence"}
			}
			out = append(out, token{kind: tString, text: text, pos: i})
			i = j + 1
		case c == '-' || c >= '0' && c <= '9':
			j := scanNumber(s, i)
			if j == i {
				return nil, &SyntaxError{i, fmt.Sprintf("%q does not start a value", string(c))}
			}
			f, err := strconv.ParseFloat(s[i:j], 64)
			if err != nil {
				return nil, &SyntaxError{i, fmt.Sprintf("%q is not a number", s[i:j])}
			}
			out = append(out, token{kind: tNumber, text: s[i:j], num: f, pos: i})
			i = j
		case c == '_' || c < 0x80 && unicode.IsLetter(rune(c)):
			j := i
			for j < len(s) && (s[j] == '_' || s[j] == '.' || s[j] < 0x80 && (unicode.IsLetter(rune(s[j])) || unicode.IsDigit(rune(s[j])))) {
				j++
			}
			word := s[i:j]
			if strings.EqualFold(word, "datetime") && j < len(s) && s[j] == '(' {
				end := strings.IndexByte(s[j:], ')')
				if end < 0 {
					return nil, &SyntaxError{j, "datetime( is not closed with )"}
				}
				out = append(out, token{kind: tDatetime, text: strings.TrimSpace(s[j+1 : j+end]), pos: i})
				i = j + end + 1
				continue
			}
			if strings.HasSuffix(word, ".") || strings.Contains(word, "..") {
				return nil, &SyntaxError{i, fmt.Sprintf("%q is not a field name", word)}
			}
			out = append(out, token{kind: tIdent, text: word, pos: i})
			i = j
		default:
			return nil, &SyntaxError{i, fmt.Sprintf("unexpected character %q", rune(c))}
		}
	}
	return append(out, token{kind: tEOF, pos: len(s)}), nil
}

// scanNumber returns the end of the number starting at i: -?digits(.digits)?(e[+-]?digits)?
func scanNumber(s string, i int) int {
	j := i
	if j < len(s) && s[j] == '-' {
		j++
	}
	digits := func() bool {
		start := j
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		return j > start
	}
	if !digits() {
		return i
	}
	if j < len(s) && s[j] == '.' {
		j++
		if !digits() {
			return i
		}
	}
	if j < len(s) && (s[j] == 'e' || s[j] == 'E') {
		k := j
		j++
		if j < len(s) && (s[j] == '+' || s[j] == '-') {
			j++
		}
		if !digits() {
			j = k
		}
	}
	return j
}
