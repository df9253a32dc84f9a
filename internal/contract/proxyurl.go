package contract

import "strings"

// RedactProxyURL is how the manager and the agent show a forward proxy's URL, or any URL that may carry credentials,
// in status, Events, logs and errors: the whole userinfo, user name and password, becomes "***", so
// "http://alice:s3cret@proxy:3128" reads "http://***@proxy:3128". It works on any string, valid URL or not:
// everything between "<scheme>://" (or the start, without a scheme) and the last '@' goes. That takes too much rather
// than too little on purpose: a password may hold an unescaped '/', '?', '#' or ':' that would end a parser's userinfo
// early and show the rest.
func RedactProxyURL(s string) string {
	start := 0
	if scheme, ok := URLScheme(s); ok {
		start = len(scheme) + len("://")
	}
	at := strings.LastIndexByte(s[start:], '@')
	if at < 0 {
		return s
	}
	return s[:start] + "***" + s[start+at:]
}

// URLScheme returns the scheme of s when s starts with "<scheme>://" and the scheme is a valid RFC 3986 scheme token.
func URLScheme(s string) (string, bool) {
	i := strings.Index(s, "://")
	if i <= 0 {
		return "", false
	}
	for j, r := range s[:i] {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		case j > 0 && (r >= '0' && r <= '9' || r == '+' || r == '-' || r == '.'):
		default:
			return "", false
		}
	}
	return s[:i], true
}
