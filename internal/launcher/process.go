package launcher

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/testenv"
)

// startProcess runs the command line with its output appended to logPath. The process gets its own process group,
// so a Ctrl-C in the terminal reaches the launcher, which stops it in order, and it is killed if the launcher dies.
func startProcess(cl *commandLine, dir, logPath string) (*testenv.Process, error) {
	return testenv.Run(testenv.Command{
		Path: cl.Path, Args: cl.Args, Env: cl.Env, Dir: dir, LogPath: logPath, AppendLog: true, OwnGroup: true,
		Header: fmt.Sprintf("--- launcher: %s starting %s %s\n", time.Now().Format(time.RFC3339), cl.Path, strings.Join(cl.Args, " ")),
		OnExit: func(log io.Writer, how string) {
			fmt.Fprintf(log, "--- launcher: %s exited: %s\n", time.Now().Format(time.RFC3339), how)
		},
	})
}

// ports hands out loopback ports for the listening ports pods share, so two pods are never given the same one.
type ports struct {
	mu    sync.Mutex
	owner map[int32]string
}

// take returns rendered when nothing listens on it and no other owner holds it, else the port the owner holds (when
// still free, so a restarted process keeps its port), else a free port; the owner (a pod's rendered port,
// "<pod>/<port>") holds it until release.
func (p *ports) take(owner string, rendered int32) (int32, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.owner == nil {
		p.owner = map[int32]string{}
	}
	previous := int32(0)
	for q, o := range p.owner {
		if o == owner {
			previous = q
		}
	}
	usable := func(port int32) bool {
		if port == 0 {
			return false
		}
		if o, ok := p.owner[port]; ok && o != owner {
			return false
		}
		return portFree(port)
	}
	port := int32(0)
	switch {
	case usable(rendered):
		port = rendered
	case usable(previous):
		port = previous
	default:
		for range 10 {
			free, err := freePort()
			if err != nil {
				return 0, err
			}
			if usable(free) {
				port = free
				break
			}
		}
		if port == 0 {
			return 0, errors.New("no free loopback port")
		}
	}
	for q, o := range p.owner {
		if o == owner && q != port {
			delete(p.owner, q)
		}
	}
	p.owner[port] = owner
	return port, nil
}

// release frees every port of a pod.
func (p *ports) release(pod string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for q, o := range p.owner {
		if strings.HasPrefix(o, pod+"/") {
			delete(p.owner, q)
		}
	}
}

func portFree(port int32) bool {
	l, err := net.Listen("tcp", net.JoinHostPort(loopback, strconv.Itoa(int(port))))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

func freePort() (int32, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(loopback, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return int32(l.Addr().(*net.TCPAddr).Port), nil
}
