// Package contract is what the manager, the proxy-server, the proxy-agent and the Go client agree on without
// importing each other: the ports, the names of the proxy-servers' Service and certificate secrets, the agent
// certificate's subject (the cluster in the common name, the install namespace and signing CA in the organizational
// units) and the identifiers an agent may claim. The manager renders from it; the data-plane binaries and
// pkg/clusterproxy read from it.
package contract
