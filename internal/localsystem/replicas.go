package localsystem

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/pkg/clusterproxy"
)

// ReplicaAgents asks each Ready proxy-server pod, through a port-forward to its HTTP-CONNECT port, which agents it
// holds, and returns the answers by pod name. Pod addresses are not routed from the machine: the port-forward goes
// through the hub's kube-apiserver and kubelet, as kubectl port-forward does.
func (s *System) ReplicaAgents(ctx context.Context) (map[string]map[string][]string, error) {
	pods := &corev1.PodList{}
	if err := s.HubClient.List(ctx, pods, client.InNamespace(Namespace),
		client.MatchingLabels{proxyv1alpha1.ComponentLabel: proxyv1alpha1.ComponentProxyServer}); err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(s.Hub.Config)
	if err != nil {
		return nil, err
	}
	transport, upgrader, err := spdy.RoundTripperFor(s.Hub.Config)
	if err != nil {
		return nil, err
	}
	port := strconv.Itoa(int(defaultPorts().HTTPConnectServer))
	forward := func(pod string) portForwarder {
		url := cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(Namespace).Name(pod).SubResource("portforward").URL()
		dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, url)
		return func(stop, ready chan struct{}) (*portforward.PortForwarder, error) {
			return portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:" + port}, stop, ready, io.Discard, io.Discard)
		}
	}
	out := map[string]map[string][]string{}
	for _, pod := range pods.Items {
		if pod.DeletionTimestamp != nil || !podReady(&pod) {
			continue
		}
		agents, err := podAgents(ctx, s.Hub.Config, forward(pod.Name))
		if err != nil {
			return nil, fmt.Errorf("proxy-server pod %s: %w", pod.Name, err)
		}
		out[pod.Name] = agents
	}
	return out, nil
}

// portForwarder forwards a local port to one proxy-server pod's HTTP-CONNECT port until stop closes.
type portForwarder func(stop, ready chan struct{}) (*portforward.PortForwarder, error)

// podAgents asks one proxy-server pod, through forward, which agents it holds.
func podAgents(ctx context.Context, hub *rest.Config, forward portForwarder) (map[string][]string, error) {
	stop, ready := make(chan struct{}), make(chan struct{})
	defer close(stop)
	fw, err := forward(stop, ready)
	if err != nil {
		return nil, err
	}
	failed := make(chan error, 1)
	go func() { failed <- fw.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-failed:
		return nil, fmt.Errorf("port-forward: %w", err)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	forwarded, err := fw.GetPorts()
	if err != nil {
		return nil, err
	}
	resolve, err := clusterproxy.ParseResolve([]string{fmt.Sprintf("proxy-entrypoint.%s.svc:%d=127.0.0.1:%d", Namespace, forwarded[0].Remote, forwarded[0].Local)})
	if err != nil {
		return nil, err
	}
	proxies, err := clusterproxy.New(ctx, hub, clusterproxy.Options{Resolve: resolve})
	if err != nil {
		return nil, err
	}
	return proxies.ConnectedAgents(ctx)
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// everyReplicaHoldsEveryAgent is whether the proxy-server runs its replicas, each Ready and holding every agent of
// every cluster (the agents have as many replicas); it says what is missing otherwise.
func (s *System) everyReplicaHoldsEveryAgent(ctx context.Context) (bool, string, error) {
	replicas, err := s.ReplicaAgents(ctx)
	if err != nil {
		return false, "", err
	}
	if len(replicas) != s.opts.Replicas {
		return false, fmt.Sprintf("%d of %d proxy-server replicas Ready", len(replicas), s.opts.Replicas), nil
	}
	for pod, agents := range replicas {
		for _, cluster := range s.Clusters() {
			if n := len(agents[cluster]); n != s.opts.Replicas {
				return false, fmt.Sprintf("proxy-server %s holds %d of %d agents of %s", pod, n, s.opts.Replicas, cluster), nil
			}
		}
	}
	return true, "", nil
}
