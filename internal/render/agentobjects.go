package render

import (
	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/proxyenv"
)

// AgentDeploymentLabels are the labels of the agent Deployment AgentWork renders, which are also its selector and its
// pods' labels; they do not depend on the configuration. The local launcher finds the Deployment by them.
func AgentDeploymentLabels() map[string]string {
	d := agentDeployment(AgentInput{MPC: &proxyv1alpha1.ManagedProxyConfiguration{}}, DefaultAgentNamespace, "",
		proxyenv.Settings{}, proxyenv.AgentVariables{}, nil, proxyv1alpha1.NodePlacement{})
	return d.Labels
}
