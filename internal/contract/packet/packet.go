// Package packet builds the control packets of konnectivity's protocol (client.Packet), which the proxy-server's
// router, its in-process tunnels and the agent send, and decodes DATA packets into pooled payloads (Codec). DATA
// packets are built where their payloads are, which pool them.
package packet

import (
	"errors"

	"sigs.k8s.io/apiserver-network-proxy/konnectivity-client/proto/client"
)

// ErrNoAgent is the DIAL_RSP error of a dial to a host no connected agent serves, in ANP's words, which clients
// (tunnelclient among them) match: nothing reached the cluster, so the request may be sent again.
var ErrNoAgent = errors.New("No agent available") //nolint:staticcheck // ANP's words, matched by clients

// DialRequest asks for a TCP connection to address; random names the dial in its answer.
func DialRequest(address string, random int64) *client.Packet {
	return &client.Packet{Type: client.PacketType_DIAL_REQ, Payload: &client.Packet_DialRequest{
		DialRequest: &client.DialRequest{Protocol: "tcp", Address: address, Random: random},
	}}
}

// DialResponse answers dial random: connection connID, or the error errMsg (connID 0) when it is not empty.
func DialResponse(random, connID int64, errMsg string) *client.Packet {
	return &client.Packet{Type: client.PacketType_DIAL_RSP, Payload: &client.Packet_DialResponse{
		DialResponse: &client.DialResponse{Random: random, ConnectID: connID, Error: errMsg},
	}}
}

// CloseDial withdraws dial random, or says it ended without a connection.
func CloseDial(random int64) *client.Packet {
	return &client.Packet{Type: client.PacketType_DIAL_CLS, Payload: &client.Packet_CloseDial{
		CloseDial: &client.CloseDial{Random: random},
	}}
}

// CloseRequest asks to close connection connID.
func CloseRequest(connID int64) *client.Packet {
	return &client.Packet{Type: client.PacketType_CLOSE_REQ, Payload: &client.Packet_CloseRequest{
		CloseRequest: &client.CloseRequest{ConnectID: connID},
	}}
}

// CloseResponse says connection connID is closed, with errMsg when it was not a clean close.
func CloseResponse(connID int64, errMsg string) *client.Packet {
	return &client.Packet{Type: client.PacketType_CLOSE_RSP, Payload: &client.Packet_CloseResponse{
		CloseResponse: &client.CloseResponse{ConnectID: connID, Error: errMsg},
	}}
}

// Drain tells the server the agent is going: new dials should go to other agents.
func Drain() *client.Packet {
	return &client.Packet{Type: client.PacketType_DRAIN, Payload: &client.Packet_Drain{Drain: &client.Drain{}}}
}

// Flow control per connection, which konnectivity's protocol lacks: an agent stream carries many connections, and
// without it the proxy-server can only slow the whole stream down for the one client that reads slowly. This
// product's agent announces in its stream's metadata (FlowControlHeader: FlowControlPause) that it takes two more
// packet types, which ANP's agent would log and ignore and the proxy-server sends no other agent: Pause, after which
// the agent reads nothing more from the connection's destination, and Resume, after which it reads again.
const (
	FlowControlHeader = "cluster-proxy-flow-control"
	FlowControlPause  = "pause"

	PauseType  client.PacketType = 64
	ResumeType client.PacketType = 65
)

// Pause asks the agent to stop reading connection connID's destination until Resume.
func Pause(connID int64) *client.Packet {
	return &client.Packet{Type: PauseType, Payload: &client.Packet_Data{Data: &client.Data{ConnectID: connID}}}
}

// Resume lets the agent read connection connID's destination again.
func Resume(connID int64) *client.Packet {
	return &client.Packet{Type: ResumeType, Payload: &client.Packet_Data{Data: &client.Data{ConnectID: connID}}}
}

// ErrAgentBusy is the DIAL_RSP error of a dial to an agent stream that carries as many connections, or has as many
// dials unanswered, as the proxy-server allows one agent: nothing reached the cluster, so the dial may be made again.
var ErrAgentBusy = errors.New("the cluster's agent carries as many connections and dials as this proxy-server allows; try again")
