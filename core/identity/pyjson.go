package identity

import "unicode/utf16"

// appendPyJSONString appends s as a JSON string literal rendered the way
// Python's json.dumps does by default (ensure_ascii=True): the short escapes
// \" \\ \n \r \t \b \f, every other char outside ' '..'~' as \uXXXX with
// lowercase hex and surrogate pairs above U+FFFF, and no HTML escaping of <>&
// (unlike encoding/json). Byte-identical rendering is what lets tokens minted
// here verify with the Python tools and reproduce the published vectors.
// Invalid UTF-8 is rendered as U+FFFD, as encoding/json would.
func appendPyJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for _, r := range s {
		switch {
		case r == '"':
			dst = append(dst, '\\', '"')
		case r == '\\':
			dst = append(dst, '\\', '\\')
		case r == '\n':
			dst = append(dst, '\\', 'n')
		case r == '\r':
			dst = append(dst, '\\', 'r')
		case r == '\t':
			dst = append(dst, '\\', 't')
		case r == '\b':
			dst = append(dst, '\\', 'b')
		case r == '\f':
			dst = append(dst, '\\', 'f')
		case r >= ' ' && r <= '~':
			dst = append(dst, byte(r))
		case r < 0x10000:
			dst = appendUEscape(dst, r)
		default:
			hi, lo := utf16.EncodeRune(r)
			dst = appendUEscape(appendUEscape(dst, hi), lo)
		}
	}
	return append(dst, '"')
}

func appendUEscape(dst []byte, r rune) []byte {
	const digits = "0123456789abcdef"
	return append(dst, '\\', 'u', digits[r>>12&0xf], digits[r>>8&0xf], digits[r>>4&0xf], digits[r&0xf])
}
