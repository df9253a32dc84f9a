package realcluster

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"time"
)

// CutNetwork takes the cluster off the network for d, or until ctx ends: Disconnect, then Reconnect. Every path into
// or out of the cluster crosses the machine's end of its veth (to the hub, the other clusters and the programs on the
// machine alike), so for d nothing reaches the cluster and it reaches nothing. Connections whose packets were lost
// carry on afterwards unless one of their ends gave up on them meanwhile.
func (c *Cluster) CutNetwork(ctx context.Context, d time.Duration) error {
	if err := c.Disconnect(); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	return c.Reconnect()
}

// Disconnect sets the machine's end of the cluster's veth down. The kernel drops the routes through a link that goes
// down (the machine's packets for the cluster then meet the guard route's blackhole), and the node's end, in the
// cluster's namespace, loses its carrier. Reconnect undoes it.
func (c *Cluster) Disconnect() error {
	return runIP("link", "set", c.name, "down")
}

// Reconnect sets the machine's end of the cluster's veth up again, then restores, on both sides, the routes that
// createNetwork's addresses made: the route to the cluster's /24 on the machine and in the cluster's namespace, and the
// machine's local route to its own address. The kernel re-adds an IPv4 address's routes when its link comes up;
// restoring them leaves the network as createNetwork made it whatever the kernel did.
func (c *Cluster) Reconnect() error {
	for _, args := range c.reconnectSteps() {
		if err := runIP(args...); err != nil {
			return err
		}
	}
	return nil
}

// reconnectSteps are the ip commands of Reconnect, in order.
func (c *Cluster) reconnectSteps() [][]string {
	subnet := (&net.IPNet{IP: c.HostIP.Mask(net.CIDRMask(24, 32)), Mask: net.CIDRMask(24, 32)}).String()
	host, node := c.HostIP.String(), c.NodeIP.String()
	return [][]string{
		{"link", "set", c.name, "up"},
		{"route", "replace", subnet, "dev", c.name, "proto", "kernel", "scope", "link", "src", host},
		{"route", "replace", "local", host, "dev", c.name, "table", "local", "proto", "kernel", "scope", "host", "src", host},
		{"-n", c.name, "route", "replace", subnet, "dev", "eth0", "proto", "kernel", "scope", "link", "src", node},
	}
}

// runIP runs ip with args.
func runIP(args ...string) error {
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %v: %w: %s", args, err, out)
	}
	return nil
}
