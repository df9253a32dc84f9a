package sessionrec

import (
	"net/http"
	"strings"
)

// Protocol is the stream protocol of an upgraded exec or attach connection.
type Protocol int

const (
	// SPDY is SPDY/3.1 with the remote command streams of X-Stream-Protocol-Version v1 to v5.channel.k8s.io.
	SPDY Protocol = iota + 1
	// WebSocket is RFC 6455 with a channel.k8s.io subprotocol (v4, v5, or unversioned): binary messages whose first
	// byte is the channel.
	WebSocket
	// WebSocketBase64 is RFC 6455 with a base64.channel.k8s.io subprotocol: text messages, the channel an ASCII digit
	// and the data base64.
	WebSocketBase64
)

func (p Protocol) String() string {
	switch p {
	case SPDY:
		return "SPDY"
	case WebSocket:
		return "WebSocket"
	case WebSocketBase64:
		return "WebSocketBase64"
	}
	return "unknown"
}

// ProtocolOf tells the stream protocol from the cluster's 101 answer. ok is false for what is not a remote command
// stream (port-forward, the websocket tunnel of SPDY) and for websocket extensions (compression), which the recorder
// cannot read.
func ProtocolOf(res *http.Response) (Protocol, bool) {
	if res.StatusCode != http.StatusSwitchingProtocols {
		return 0, false
	}
	switch upgrade := strings.TrimSpace(res.Header.Get("Upgrade")); {
	case strings.EqualFold(upgrade, "SPDY/3.1"):
		if version := res.Header.Get("X-Stream-Protocol-Version"); version == "" || isChannelProtocol(version, "channel.k8s.io") {
			return SPDY, true // no version: v1, which the kubelet still speaks
		}
	case strings.EqualFold(upgrade, "websocket"):
		if res.Header.Get("Sec-WebSocket-Extensions") != "" {
			return 0, false
		}
		// One subprotocol, or none: the kubelet's unversioned binary channels.
		switch sub := strings.TrimSpace(res.Header.Get("Sec-WebSocket-Protocol")); {
		case sub == "" || isChannelProtocol(sub, "channel.k8s.io"):
			return WebSocket, true
		case isChannelProtocol(sub, "base64.channel.k8s.io"):
			return WebSocketBase64, true
		}
	}
	return 0, false
}

// isChannelProtocol says whether p is name or a version of it: v<digits>.name.
func isChannelProtocol(p, name string) bool {
	p = strings.TrimSpace(p)
	if p == name {
		return true
	}
	version, rest, ok := strings.Cut(p, ".")
	if !ok || rest != name || len(version) < 2 || version[0] != 'v' {
		return false
	}
	for _, c := range version[1:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
