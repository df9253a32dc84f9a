package clusterproxy_test

import (
	"context"
	"fmt"
	"net/http"
	"os"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/streaming/pkg/httpstream"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/pkg/clusterproxy"
)

// A hub program lists the namespaces of managed cluster "cluster1" through its tunnel. The hub credentials read the
// proxy-client Secret; the managed cluster's own credentials (here a token and CA issued there) authorise the request.
func ExampleClient_RESTConfig() {
	ctx := context.Background()
	hub, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		panic(err)
	}
	// Outside the hub cluster, point the in-cluster Service at a port-forward.
	resolve, err := clusterproxy.ParseResolve([]string{"proxy-entrypoint.open-cluster-management-addon.svc:8090=127.0.0.1:8090"})
	if err != nil {
		panic(err)
	}
	proxies, err := clusterproxy.New(ctx, hub, clusterproxy.Options{Resolve: resolve})
	if err != nil {
		panic(err)
	}
	cfg, err := proxies.RESTConfig("cluster1", &rest.Config{
		Host:            "https://kubernetes.default.svc", // as the managed kube-apiserver's certificate names it
		BearerTokenFile: "cluster1.token",
		TLSClientConfig: rest.TLSClientConfig{CAFile: "cluster1-ca.crt"},
	})
	if err != nil {
		panic(err)
	}
	namespaces, err := kubernetes.NewForConfigOrDie(cfg).CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		panic(err)
	}
	for _, ns := range namespaces.Items {
		fmt.Println(ns.Name)
	}
}

// The same config runs a command in a pod of cluster1, as kubectl exec does: client-go's executors (SPDY, websocket,
// and the fallback between them), attach and port-forward go through the tunnel too.
func ExampleClient_RESTConfig_exec() {
	ctx := context.Background()
	hub, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		panic(err)
	}
	proxies, err := clusterproxy.New(ctx, hub, clusterproxy.Options{})
	if err != nil {
		panic(err)
	}
	cfg, err := proxies.RESTConfig("cluster1", &rest.Config{
		Host:            "https://kubernetes.default.svc",
		BearerTokenFile: "cluster1.token",
		TLSClientConfig: rest.TLSClientConfig{CAFile: "cluster1-ca.crt"},
	})
	if err != nil {
		panic(err)
	}
	req := kubernetes.NewForConfigOrDie(cfg).CoreV1().RESTClient().Post().
		Resource("pods").Namespace("default").Name("web").SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Command: []string{"cat", "/etc/hostname"}, Stdout: true, Stderr: true},
			clientgoscheme.ParameterCodec)
	websocketExec, err := remotecommand.NewWebSocketExecutor(cfg, http.MethodGet, req.URL().String())
	if err != nil {
		panic(err)
	}
	spdyExec, err := remotecommand.NewSPDYExecutor(cfg, http.MethodPost, req.URL())
	if err != nil {
		panic(err)
	}
	exec, err := remotecommand.NewFallbackExecutor(websocketExec, spdyExec, httpstream.IsUpgradeFailure)
	if err != nil {
		panic(err)
	}
	if err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: os.Stdout, Stderr: os.Stderr}); err != nil {
		panic(err)
	}
}

// Probe tells whether a cluster's kube-apiserver answers through its tunnel, and how fast.
func ExampleClient_Probe() {
	ctx := context.Background()
	hub, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		panic(err)
	}
	proxies, err := clusterproxy.New(ctx, hub, clusterproxy.Options{})
	if err != nil {
		panic(err)
	}
	result, err := proxies.Probe(ctx, "cluster1")
	switch {
	case err != nil:
		fmt.Println("unreachable:", err)
	case result.Healthy:
		fmt.Println("healthy in", result.Latency)
	default:
		fmt.Println("unhealthy:", result.Message)
	}
}

// Dialer reaches the agent's service-proxy (port 7443, plain HTTP inside the mutual-TLS tunnel), which authenticates
// the bearer token and forwards to the managed kube-apiserver.
func ExampleClient_Dialer() {
	ctx := context.Background()
	hub, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		panic(err)
	}
	proxies, err := clusterproxy.New(ctx, hub, clusterproxy.Options{})
	if err != nil {
		panic(err)
	}
	httpClient := &http.Client{Transport: &http.Transport{DialContext: proxies.Dialer("cluster1").DialContext}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://cluster1:%d/version", clusterproxy.ServiceProxyPort), nil)
	if err != nil {
		panic(err)
	}
	req.Header.Set("Authorization", "Bearer "+os.Getenv("CLUSTER1_TOKEN"))
	resp, err := httpClient.Do(req)
	if err != nil {
		panic(err)
	}
	defer func() { _ = resp.Body.Close() }()
	fmt.Println(resp.Status)
}
