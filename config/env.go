package config

import (
	"bytes"
	"fmt"
)

// expand replaces ${NAME} references in the raw YAML text with the values
// that lookup returns, before the text is parsed. The rules:
//
//   - Only the form ${NAME} is expanded, NAME being a letter or '_'
//     followed by letters, digits or '_'. There are no defaults or other
//     shell forms: ${NAME:-x} is an error.
//   - $$ is a literal $ (so $${NAME} is the literal text ${NAME}).
//   - A $ followed by anything but '{' or '$' is left alone (pa$word).
//   - ${ that does not form a valid reference is an error, so a typo never
//     passes silently into a secret; write $${ for a literal ${.
//   - An unset variable is an error naming it and its line. A variable set
//     to the empty string expands to nothing.
//   - A value with a line break is an error: it would change the document's
//     structure and every later line number.
//   - A line whose first non-blank character is '#' is a comment and is
//     copied unchanged, so commenting a line out also disables its
//     variables. References in a comment after a value on the same line
//     are expanded.
//
// Values are inserted verbatim, so a value with characters that mean
// something to YAML (": ", " #", a leading '*', '&', '!', '[', '{', quotes)
// should be single-quoted in the file: secret: '${SECRET}'.
//
// expand reports every problem; the returned text keeps its line numbers,
// with nothing inserted for a reference in error, so that parsing can go on
// to find the file's other problems. The values of the variables used are
// returned too, so that error messages can be scrubbed of them.
func expand(data []byte, lookup func(string) (string, bool)) (out []byte, values []string, problems Problems) {
	out = make([]byte, 0, len(data))
	line := 0
	for len(data) > 0 {
		line++
		var text []byte
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			text, data = data[:i+1], data[i+1:]
		} else {
			text, data = data, nil
		}
		if t := bytes.TrimLeft(text, " \t"); len(t) > 0 && t[0] == '#' {
			out = append(out, text...)
			continue
		}
		for i := 0; i < len(text); i++ {
			c := text[i]
			if c != '$' || i+1 == len(text) {
				out = append(out, c)
				continue
			}
			switch text[i+1] {
			case '$':
				out = append(out, '$')
				i++
			case '{':
				end := bytes.IndexByte(text[i+2:], '}')
				if end < 0 || !validVarName(text[i+2:i+2+end]) {
					// The text is not quoted: it might be part of a secret.
					problems = append(problems, Problem{Line: line, Msg: fmt.Sprintf("column %d: malformed variable reference: only ${NAME} is expanded; write $$ for a literal $", i+1)})
					out = append(out, '$')
					continue
				}
				name := string(text[i+2 : i+2+end])
				i += 2 + end
				v, ok := lookup(name)
				switch {
				case !ok:
					problems = append(problems, Problem{Line: line, Msg: fmt.Sprintf("environment variable %s is not set", name)})
				case bytes.ContainsAny([]byte(v), "\r\n"):
					problems = append(problems, Problem{Line: line, Msg: fmt.Sprintf("environment variable %s contains a line break", name)})
				default:
					out = append(out, v...)
					if v != "" {
						values = append(values, v)
					}
				}
			default:
				out = append(out, c)
			}
		}
	}
	return out, values, problems
}

func validVarName(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for i, c := range b {
		switch {
		case c == '_', 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
