// Package ports picks TCP ports for processes that bind them later.
//
// A port the kernel hands out for ":0" comes from its ephemeral range (ip_local_port_range, 32768 and up by
// default), so once the probe closes, the kernel can give it again to another listener or to an outgoing connection
// before the process it was picked for binds it ("bind: address already in use"). Free picks below that range.
package ports

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

const (
	lowest        = 20000
	ephemeralFrom = "/proc/sys/net/ipv4/ip_local_port_range"
)

var picked = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// Free returns a port nothing listens on right now, on any interface, below the ephemeral range, and not returned
// before in this process. It panics when it finds none in a thousand tries: the machine is out of ports.
func Free() int {
	highest := 32767
	if b, err := os.ReadFile(ephemeralFrom); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			if lo, err := strconv.Atoi(f[0]); err == nil && lo-1 > lowest {
				highest = lo - 1
			}
		}
	}
	picked.Lock()
	defer picked.Unlock()
	for range 1000 {
		p := lowest + rand.IntN(highest-lowest+1)
		if picked.ports[p] {
			continue
		}
		l, err := net.Listen("tcp", ":"+strconv.Itoa(p))
		if err != nil {
			continue
		}
		_ = l.Close()
		picked.ports[p] = true
		return p
	}
	panic("no free port below the ephemeral range")
}
