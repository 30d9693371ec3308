package filter

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"
)

// SyntaxError is a filter that does not parse. Offset is where, in bytes from the start.
type SyntaxError struct {
	Offset int
	Msg    string
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("at offset %d: %s", e.Offset, e.Msg) }

func syntaxErr(offset int, format string, args ...any) *SyntaxError {
	return &SyntaxError{Offset: offset, Msg: fmt.Sprintf(format, args...)}
}

type tokenKind int

const (
	tokEOF    tokenKind = iota
	tokWord             // identifier or keyword
	tokString           // string literal
	tokNumber           // number literal
	tokTime             // datetime(...) literal
	tokLParen
	tokRParen
	tokLBrack
	tokRBrack
	tokComma
	tokOp // = != < > <= >=
)

type token struct {
	kind tokenKind
	pos  int    // byte offset of the token's start
	text string // the token's source text
	kw   string // for a keyword, its lower-case form; "" for identifiers and the rest
	val  Value  // for a literal, its value
	// spaced: whitespace, the start of the input or "(" precedes the token.
	spaced bool
}

// describe names the token in an error message, as in `found "limit"`.
func (t token) describe() string {
	switch t.kind {
	case tokEOF:
		return "end of input"
	case tokString:
		return "string " + truncate(t.text)
	case tokNumber:
		return "number " + truncate(t.text)
	case tokTime:
		return truncate(t.text)
	}
	return strconv.Quote(truncate(t.text))
}

// keyword returns the lower-case form of a reserved word, or "" for an identifier.
func keyword(word string) string {
	if len(word) < 2 || len(word) > len("startswith") {
		return ""
	}
	switch w := strings.ToLower(word); w {
	case "and", "or", "not", "in", "between", "is", "null", "true", "false",
		"contains", "icontains", "startswith", "endswith", "anyof", "allof", "datetime",
		"sort", "by", "asc", "desc", "skip", "limit", "none":
		return w
	}
	return ""
}

type lexer struct {
	src  string
	pos  int
	prev tokenKind // kind of the token lexed last; tokEOF before the first
}

func isSpace(c byte) bool  { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
func isDigit(c byte) bool  { return '0' <= c && c <= '9' }
func isLetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_' }
func isWord(c byte) bool   { return isLetter(c) || isDigit(c) || c == '.' }

// next lexes the next token.
func (l *lexer) next() (token, error) {
	start := l.pos
	for l.pos < len(l.src) && isSpace(l.src[l.pos]) {
		l.pos++
	}
	t := token{pos: l.pos, spaced: l.pos > start || l.prev == tokEOF || l.prev == tokLParen}
	err := l.lex(&t)
	if err != nil {
		return token{}, err
	}
	t.text = l.src[t.pos:l.pos]
	l.prev = t.kind
	return t, nil
}

func (l *lexer) lex(t *token) error {
	if l.pos >= len(l.src) {
		t.kind = tokEOF
		return nil
	}
	c := l.src[l.pos]
	switch {
	case c == '(':
		t.kind = tokLParen
		l.pos++
	case c == ')':
		t.kind = tokRParen
		l.pos++
	case c == '[':
		t.kind = tokLBrack
		l.pos++
	case c == ']':
		t.kind = tokRBrack
		l.pos++
	case c == ',':
		t.kind = tokComma
		l.pos++
	case c == '=':
		t.kind = tokOp
		l.pos++
	case c == '!':
		if l.pos+1 >= len(l.src) || l.src[l.pos+1] != '=' {
			return syntaxErr(l.pos, `unexpected character "!"; the inequality operator is "!=", negation is "not"`)
		}
		t.kind = tokOp
		l.pos += 2
	case c == '<' || c == '>':
		t.kind = tokOp
		l.pos++
		if l.pos < len(l.src) && l.src[l.pos] == '=' {
			l.pos++
		}
	case c == '"':
		return l.lexString(t)
	case c == '-' || isDigit(c):
		return l.lexNumber(t)
	case isLetter(c):
		return l.lexWord(t)
	case c == '&':
		return syntaxErr(l.pos, `unexpected character "&"; conjunction is "and"`)
	case c == '|':
		return syntaxErr(l.pos, `unexpected character "|"; disjunction is "or"`)
	case c == '\'':
		return syntaxErr(l.pos, `unexpected character "'"; strings are written in double quotes`)
	default:
		r, _ := utf8.DecodeRuneInString(l.src[l.pos:])
		return syntaxErr(l.pos, "unexpected character %s", strconv.Quote(string(r)))
	}
	return nil
}

func (l *lexer) lexString(t *token) error {
	start := l.pos
	l.pos++ // opening quote
	var b strings.Builder
	from := l.pos // start of the run of plain bytes not yet copied to b
	for l.pos < len(l.src) {
		c := l.src[l.pos]
		switch {
		case c == '"':
			b.WriteString(l.src[from:l.pos])
			l.pos++
			t.kind, t.val = tokString, String(b.String())
			return nil
		case c == '\\':
			b.WriteString(l.src[from:l.pos])
			r, n, err := l.escape()
			if err != nil {
				return err
			}
			b.WriteRune(r)
			l.pos += n
			from = l.pos
		case c < 0x20:
			return syntaxErr(l.pos, `control character U+%04X in string; write it as an escape: \n, \r, \t or \uXXXX`, c)
		default:
			l.pos++
		}
	}
	return syntaxErr(start, "unterminated string; expected a closing \" before the end of input")
}

// escape decodes the escape sequence at l.pos, returning its rune and length.
func (l *lexer) escape() (rune, int, error) {
	s := l.src[l.pos:]
	if len(s) < 2 {
		return 0, 0, syntaxErr(l.pos, `unterminated escape at the end of input`)
	}
	switch s[1] {
	case '"', '\\':
		return rune(s[1]), 2, nil
	case 'n':
		return '\n', 2, nil
	case 'r':
		return '\r', 2, nil
	case 't':
		return '\t', 2, nil
	case 'u':
		if len(s) >= 6 {
			if v, err := strconv.ParseUint(s[2:6], 16, 16); err == nil && !utf16.IsSurrogate(rune(v)) {
				return rune(v), 6, nil
			}
		}
		end := 2
		for end < len(s) && end < 6 && s[end] != '"' {
			end++
		}
		return 0, 0, syntaxErr(l.pos, `invalid escape %s in string; \u takes four hexadecimal digits of a character outside U+D800 to U+DFFF`, s[:end])
	}
	_, n := utf8.DecodeRuneInString(s[1:])
	return 0, 0, syntaxErr(l.pos, `invalid escape %s in string; the escapes are \", \\, \n, \r, \t and \uXXXX`, s[:1+n])
}

func (l *lexer) lexNumber(t *token) error {
	s, start := l.src, l.pos
	digits := func() int {
		from := l.pos
		for l.pos < len(s) && isDigit(s[l.pos]) {
			l.pos++
		}
		return l.pos - from
	}
	if s[l.pos] == '-' {
		l.pos++
	}
	if digits() == 0 {
		return syntaxErr(start, `expected a digit after "-"`)
	}
	if l.pos+1 < len(s) && s[l.pos] == '.' && isDigit(s[l.pos+1]) {
		l.pos++
		digits()
	}
	if l.pos < len(s) && (s[l.pos] == 'e' || s[l.pos] == 'E') {
		at := l.pos
		l.pos++
		if l.pos < len(s) && (s[l.pos] == '+' || s[l.pos] == '-') {
			l.pos++
		}
		if digits() == 0 {
			l.pos = at
		}
	}
	if l.pos < len(s) && isWord(s[l.pos]) {
		for l.pos < len(s) && isWord(s[l.pos]) {
			l.pos++
		}
		return syntaxErr(start, "malformed number %q", truncate(s[start:l.pos]))
	}
	f, err := strconv.ParseFloat(s[start:l.pos], 64)
	if err != nil {
		return syntaxErr(start, "number %s is out of range", truncate(s[start:l.pos]))
	}
	t.kind, t.val = tokNumber, Number(f)
	return nil
}

func (l *lexer) lexWord(t *token) error {
	s, start := l.src, l.pos
	for l.pos < len(s) && isWord(s[l.pos]) {
		l.pos++
	}
	word := s[start:l.pos]
	for seg := range strings.SplitSeq(word, ".") {
		if seg == "" || !isLetter(seg[0]) {
			return syntaxErr(start, "malformed field name %q; expected names of letters, digits and _ joined by dots, each name starting with a letter or _", truncate(word))
		}
	}
	t.kind, t.kw = tokWord, keyword(word)
	if t.kw == "datetime" {
		return l.lexTime(t)
	}
	return nil
}

// lexTime lexes the rest of a datetime(...) literal after the word datetime.
func (l *lexer) lexTime(t *token) error {
	s := l.src
	for l.pos < len(s) && isSpace(s[l.pos]) {
		l.pos++
	}
	if l.pos >= len(s) || s[l.pos] != '(' {
		found := "end of input"
		if l.pos < len(s) {
			r, _ := utf8.DecodeRuneInString(s[l.pos:])
			found = strconv.Quote(string(r))
		}
		return syntaxErr(l.pos, `expected "(" after "datetime", found %s`, found)
	}
	open := l.pos
	end := strings.IndexByte(s[open:], ')')
	if end < 0 {
		return syntaxErr(t.pos, `unterminated datetime; expected ")" before the end of input`)
	}
	end += open
	inner := s[open+1 : end]
	lead := len(inner) - len(strings.TrimLeft(inner, " \t\n\r"))
	inner = strings.TrimSpace(inner)
	tm, err := time.Parse(time.RFC3339, inner)
	if err != nil || !rfc3339Shape(inner) {
		return syntaxErr(open+1+lead, "invalid datetime %q; expected an RFC 3339 time such as 2024-01-02T03:04:05Z", truncate(inner))
	}
	// Keep the written offset, but independently of the local time zone.
	if _, offset := tm.Zone(); offset == 0 {
		tm = tm.UTC()
	} else {
		tm = tm.In(time.FixedZone("", offset))
	}
	l.pos = end + 1
	t.kind, t.kw, t.val = tokTime, "", Time(tm)
	return nil
}

// rfc3339Shape reports whether s has the shape of an RFC 3339 date-time with upper-case
// T and Z, a point before fractional seconds, and two digits in every field, which
// time.Parse does not insist on.
func rfc3339Shape(s string) bool {
	const shape = "dddd-dd-ddTdd:dd:dd"
	if len(s) < len(shape) {
		return false
	}
	for i := range len(shape) {
		if shape[i] == 'd' && !isDigit(s[i]) || shape[i] != 'd' && s[i] != shape[i] {
			return false
		}
	}
	s = s[len(shape):]
	if len(s) > 1 && s[0] == '.' && isDigit(s[1]) {
		s = s[1:]
		for len(s) > 0 && isDigit(s[0]) {
			s = s[1:]
		}
	}
	if s == "Z" {
		return true
	}
	return len(s) == 6 && (s[0] == '+' || s[0] == '-') && isDigit(s[1]) && isDigit(s[2]) && s[3] == ':' && isDigit(s[4]) && isDigit(s[5])
}
