package contract

// HeldServersMetadata is the gRPC metadata key under which an agent's stream lists the IDs of the proxy-servers the
// agent already holds a tunnel to, one value each. A proxy-server that finds its own ID there refuses the stream with
// codes.AlreadyExists before it registers it as a backend.
//
// Agents reach the replicas through one address, so many of their connections land on a replica they already hold. A
// server that registered such a stream would route dials to it until the agent, reading the server's ID from the
// stream header, closed it; those dials were lost. Servers that do not know the key accept the stream, and the agent
// closes it as before.
const HeldServersMetadata = "cluster-proxy-held-servers"
