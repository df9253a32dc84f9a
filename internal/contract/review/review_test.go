package review

import (
	"crypto/sha256"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func TestCacheExpiresEntries(t *testing.T) {
	g := NewWithT(t)
	now := time.Unix(1000, 0)
	c := NewCache[Identity](10*time.Second, func() time.Time { return now })
	key := sha256.Sum256([]byte("token"))
	c.Put(key, Identity{Authenticated: true, User: "u"})
	id, ok := c.Get(key)
	g.Expect(ok).To(BeTrue())
	g.Expect(id.User).To(Equal("u"))
	now = now.Add(9 * time.Second)
	_, ok = c.Get(key)
	g.Expect(ok).To(BeTrue())
	now = now.Add(time.Second)
	_, ok = c.Get(key)
	g.Expect(ok).To(BeFalse(), "expired after the TTL")

	disabled := NewCache[Identity](0, time.Now)
	g.Expect(disabled).To(BeNil())
	disabled.Put(key, Identity{Authenticated: true})
	_, ok = disabled.Get(key)
	g.Expect(ok).To(BeFalse())
}

func TestCacheIsBounded(t *testing.T) {
	g := NewWithT(t)
	now := time.Unix(1000, 0)
	c := NewCache[bool](time.Minute, func() time.Time { return now })
	for i := range MaxCached + 100 {
		c.Put(sha256.Sum256([]byte(strconv.Itoa(i))), true)
	}
	g.Expect(c.Len()).To(BeNumerically("<=", MaxCached))
	last := sha256.Sum256([]byte(strconv.Itoa(MaxCached + 99)))
	_, ok := c.Get(last)
	g.Expect(ok).To(BeTrue(), "the newest entry is kept")
}
