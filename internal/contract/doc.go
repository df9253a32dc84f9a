// Package contract is what the manager, the proxy-server, the proxy-agent and the Go client agree on without
// importing each other: the ports, the names of the proxy-servers' Service and certificate secrets, the agent
// certificate's subject (the cluster in the common name, the install namespace and signing CA in the organizational
// units), the identifiers an agent may claim, and how a proxy URL is shown. The manager renders from it; the
// data-plane binaries and pkg/clusterproxy read from it.
//
// Its subpackages are the rest of what both ends of a tunnel share: the packets and codec (packet), the
// user-server/service-proxy protocol (proxyhttp), the client of the proxy-server's protocols (tunnelclient), the
// service allow-list (allowlist), and what both processes run alike (tlsreload, tlsbatch, copybuf, deadline,
// resolve). None of them imports the proxy-server, the agent or the hub.
package contract
