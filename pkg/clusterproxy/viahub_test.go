package clusterproxy

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd/api"
)

func TestRESTConfigViaHubKeepsTheHubCredentialsAndAddsThePath(t *testing.T) {
	g := NewWithT(t)
	hub := &rest.Config{Host: "https://hub.example:6443/", BearerToken: "t", TLSClientConfig: rest.TLSClientConfig{CAData: []byte("ca")}}
	cfg, err := RESTConfigViaHub(hub, "cluster1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cfg.Host).To(Equal("https://hub.example:6443/apis/gateway.proxy.open-cluster-management.io/v1alpha1/clusters/cluster1/proxy"))
	g.Expect(cfg.BearerToken).To(Equal("t"))
	g.Expect(cfg.CAData).To(Equal([]byte("ca")))
	g.Expect(hub.Host).To(Equal("https://hub.example:6443/"), "the hub's configuration is not changed")
	for _, bad := range []string{"", "a/b", "a?b", "a%2f"} {
		_, err := RESTConfigViaHub(hub, bad)
		g.Expect(err).To(HaveOccurred(), bad)
	}
	_, err = RESTConfigViaHub(nil, "cluster1")
	g.Expect(err).To(HaveOccurred())
}

func TestKubeconfigViaHubIsOneContextOnTheHubServerWithTheHubUser(t *testing.T) {
	g := NewWithT(t)
	hub := api.NewConfig()
	hub.Clusters["hub"] = &api.Cluster{Server: "https://hub.example:6443", CertificateAuthority: "/etc/hub/ca.crt"}
	hub.Clusters["other"] = &api.Cluster{Server: "https://other"}
	hub.AuthInfos["alice"] = &api.AuthInfo{Exec: &api.ExecConfig{Command: "oidc-login"}}
	hub.AuthInfos["bob"] = &api.AuthInfo{Token: "bob"}
	hub.Contexts["hub"] = &api.Context{Cluster: "hub", AuthInfo: "alice", Namespace: "team"}
	hub.Contexts["other"] = &api.Context{Cluster: "other", AuthInfo: "bob"}
	hub.CurrentContext = "hub"

	out, err := KubeconfigViaHub(hub, "", "cluster1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out.CurrentContext).To(Equal("cluster1-via-hub"))
	g.Expect(out.Clusters).To(HaveLen(1))
	g.Expect(out.Clusters["cluster1-via-hub"].Server).To(Equal("https://hub.example:6443/apis/gateway.proxy.open-cluster-management.io/v1alpha1/clusters/cluster1/proxy"))
	g.Expect(out.Clusters["cluster1-via-hub"].CertificateAuthority).To(Equal("/etc/hub/ca.crt"))
	g.Expect(out.AuthInfos).To(HaveLen(1), "the hub user only, as it is")
	g.Expect(out.AuthInfos["alice"].Exec.Command).To(Equal("oidc-login"))
	g.Expect(out.Contexts["cluster1-via-hub"]).To(Equal(&api.Context{Cluster: "cluster1-via-hub", AuthInfo: "alice", Namespace: "team"}))
	g.Expect(hub.Clusters["hub"].Server).To(Equal("https://hub.example:6443"), "the hub kubeconfig is not changed")

	_, err = KubeconfigViaHub(hub, "missing", "cluster1")
	g.Expect(err).To(MatchError(ContainSubstring(`no context "missing"`)))
}
