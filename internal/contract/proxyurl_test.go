package contract

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestRedactProxyURLRemovesTheWholeUserinfo(t *testing.T) {
	for _, tt := range []struct{ name, in, want string }{
		{name: "user and password", in: "http://alice:s3cret@proxy:3128", want: "http://***@proxy:3128"},
		{name: "user alone", in: "https://alice@proxy:3129", want: "https://***@proxy:3129"},
		{name: "no userinfo stays as it is", in: "http://proxy:3128", want: "http://proxy:3128"},
		{name: "no scheme", in: "alice:s3cret@proxy:3128", want: "***@proxy:3128"},
		{name: "a password with an unescaped slash", in: "http://alice:pa/ss@proxy:3128", want: "http://***@proxy:3128"},
		{name: "a password with '@', '#' and '?'", in: "http://alice:p@ss#w?rd@proxy:3128", want: "http://***@proxy:3128"},
		{name: "'://' inside a password without a scheme", in: "alice:p://w@proxy", want: "***@proxy"},
		{name: "a scheme of another kind", in: "socks5://alice:s3cret@proxy:1080", want: "socks5://***@proxy:1080"},
		{name: "a path after the host", in: "https://alice:s3cret@proxy:3129/a/path", want: "https://***@proxy:3129/a/path"},
		{name: "empty", in: "", want: ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got := RedactProxyURL(tt.in)
			g.Expect(got).To(Equal(tt.want))
			g.Expect(got).NotTo(Or(ContainSubstring("alice"), ContainSubstring("s3cret")))
		})
	}
}
