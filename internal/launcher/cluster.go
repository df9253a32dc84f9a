package launcher

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/render"
)

// selection picks the Deployments the launcher runs on one control plane.
type selection struct {
	labels labels.Selector // what the informer lists and watches
	match  func(*appsv1.Deployment) bool
}

// serverSelection picks the proxy-server Deployments on the hub: owned by the operator, with proxy-server pods.
func serverSelection() selection {
	return selection{
		labels: labels.SelectorFromSet(labels.Set{render.ManagedByLabel: render.ManagedByValue}),
		match: func(d *appsv1.Deployment) bool {
			return d.Spec.Template.Labels[proxyv1alpha1.ComponentLabel] == proxyv1alpha1.ComponentProxyServer
		},
	}
}

// agentSelection picks the agent Deployment on a managed cluster, in whatever namespace it was applied, by the labels
// render gives it, so the launcher follows render if they change.
func agentSelection() selection {
	return selection{
		labels: labels.SelectorFromSet(render.AgentDeploymentLabels()),
		match:  func(d *appsv1.Deployment) bool { return d.Name == render.AgentDeploymentName },
	}
}

// cluster is one control plane the launcher watches: its Deployments of interest and every Secret and ConfigMap (what
// volumes are made from), from informers.
type cluster struct {
	name      string
	client    kubernetes.Interface
	selection selection
	// apiServer is the loopback host:port of the kube-apiserver and caData its CA, for the pods' in-cluster config.
	apiServer string
	server    string
	caData    []byte

	deployments appslisters.DeploymentLister
	secrets     corelisters.SecretLister
	configMaps  corelisters.ConfigMapLister
	factories   []informers.SharedInformerFactory
	synced      []cache.InformerSynced
}

func newCluster(t Target, sel selection, onChange func()) (*cluster, error) {
	cfg := rest.CopyConfig(t.Config)
	cfg.UserAgent = "cluster-proxy-launcher"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", t.Name, err)
	}
	server, hostPort, err := apiServerAddress(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", t.Name, err)
	}
	caData := cfg.CAData
	if len(caData) == 0 && cfg.CAFile != "" {
		if caData, err = os.ReadFile(cfg.CAFile); err != nil {
			return nil, fmt.Errorf("%s: read the kube-apiserver CA: %w", t.Name, err)
		}
	}
	c := &cluster{name: t.Name, client: client, selection: sel, apiServer: hostPort, server: server, caData: caData}

	selector := sel.labels.String()
	deployFactory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = selector }))
	volumeFactory := informers.NewSharedInformerFactory(client, 0)
	deployInformer := deployFactory.Apps().V1().Deployments()
	secretInformer := volumeFactory.Core().V1().Secrets()
	configMapInformer := volumeFactory.Core().V1().ConfigMaps()
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { onChange() },
		UpdateFunc: func(any, any) { onChange() },
		DeleteFunc: func(any) { onChange() },
	}
	for _, inf := range []cache.SharedIndexInformer{deployInformer.Informer(), secretInformer.Informer(), configMapInformer.Informer()} {
		if _, err := inf.AddEventHandler(handler); err != nil {
			return nil, err
		}
		c.synced = append(c.synced, inf.HasSynced)
	}
	c.deployments = deployInformer.Lister()
	c.secrets = secretInformer.Lister()
	c.configMaps = configMapInformer.Lister()
	c.factories = []informers.SharedInformerFactory{deployFactory, volumeFactory}
	return c, nil
}

// apiServerAddress is the URL and host:port of a rest.Config's Host.
func apiServerAddress(host string) (server, hostPort string, err error) {
	u, err := url.Parse(host)
	if err != nil || u.Host == "" {
		if u, err = url.Parse("https://" + host); err != nil {
			return "", "", fmt.Errorf("kube-apiserver address %q: %w", host, err)
		}
	}
	hostPort = u.Host
	if u.Port() == "" {
		port := "443"
		if u.Scheme == "http" {
			port = "80"
		}
		hostPort = net.JoinHostPort(u.Hostname(), port)
	}
	return u.Scheme + "://" + u.Host, hostPort, nil
}

func (c *cluster) start(ctx context.Context) {
	for _, f := range c.factories {
		f.Start(ctx.Done())
	}
}

func (c *cluster) shutdown() {
	for _, f := range c.factories {
		f.Shutdown()
	}
}

func (c *cluster) hasSynced() bool {
	for _, s := range c.synced {
		if !s() {
			return false
		}
	}
	return true
}

// selected are the Deployments to run.
func (c *cluster) selected() []*appsv1.Deployment {
	all, _ := c.deployments.List(c.selection.labels) // a lister's List never fails
	var out []*appsv1.Deployment
	for _, d := range all {
		if c.selection.match(d) && d.DeletionTimestamp == nil {
			out = append(out, d)
		}
	}
	return out
}

func (c *cluster) deployment(namespace, name string) (*appsv1.Deployment, bool) {
	d, err := c.deployments.Deployments(namespace).Get(name)
	if err != nil || !c.selection.match(d) || d.DeletionTimestamp != nil {
		return nil, false
	}
	return d, true
}

func (c *cluster) secret(namespace, name string) (*corev1.Secret, bool) {
	s, err := c.secrets.Secrets(namespace).Get(name)
	return s, err == nil
}

func (c *cluster) configMap(namespace, name string) (*corev1.ConfigMap, bool) {
	cm, err := c.configMaps.ConfigMaps(namespace).Get(name)
	return cm, err == nil
}

// replicas is the Deployment's replica count, 1 when unset as the API defaults it.
func replicas(d *appsv1.Deployment) int {
	if d.Spec.Replicas == nil {
		return 1
	}
	return int(*d.Spec.Replicas)
}

// tokenTTL is how long a requested ServiceAccount token lives; it is renewed at 80 % of that, as the kubelet does.
const tokenTTL = time.Hour

type serviceAccountToken struct {
	token           string
	issued, expires time.Time
}

func (t *serviceAccountToken) due(now time.Time) bool {
	return t == nil || now.After(t.issued.Add(t.expires.Sub(t.issued)*8/10))
}

// mountsToken reports whether a pod gets a ServiceAccount token: the pod's automountServiceAccountToken, else the
// ServiceAccount's, else yes.
func (c *cluster) mountsToken(ctx context.Context, namespace string, spec *corev1.PodSpec) (bool, error) {
	if spec.AutomountServiceAccountToken != nil {
		return *spec.AutomountServiceAccountToken, nil
	}
	sa, err := c.client.CoreV1().ServiceAccounts(namespace).Get(ctx, serviceAccountName(spec), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, &missingError{fmt.Sprintf("serviceaccount %s/%s not found", namespace, serviceAccountName(spec))}
	}
	if err != nil {
		return false, fmt.Errorf("read serviceaccount %s/%s: %w", namespace, serviceAccountName(spec), err)
	}
	return sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken, nil
}

// requestToken asks the TokenRequest API for a token of the pod's ServiceAccount, as the kubelet does for the
// projected token volume.
func (c *cluster) requestToken(ctx context.Context, namespace string, spec *corev1.PodSpec) (*serviceAccountToken, error) {
	name := serviceAccountName(spec)
	now := time.Now()
	tr, err := c.client.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(tokenTTL / time.Second))},
	}, metav1.CreateOptions{})
	if apierrors.IsNotFound(err) {
		return nil, &missingError{fmt.Sprintf("serviceaccount %s/%s not found", namespace, name)}
	}
	if err != nil {
		return nil, fmt.Errorf("request a token for serviceaccount %s/%s: %w", namespace, name, err)
	}
	return &serviceAccountToken{token: tr.Status.Token, issued: now, expires: tr.Status.ExpirationTimestamp.Time}, nil
}

func serviceAccountName(spec *corev1.PodSpec) string {
	if spec.ServiceAccountName != "" {
		return spec.ServiceAccountName
	}
	return "default"
}

// inClusterKubeconfig is what rest.InClusterConfig would build in the pod: the kube-apiserver, its CA file and the
// token file, which client-go re-reads so a renewed token is used without a restart.
func inClusterKubeconfig(server, caFile, tokenFile string) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["in-cluster"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: caFile}
	cfg.AuthInfos["serviceaccount"] = &clientcmdapi.AuthInfo{TokenFile: tokenFile}
	cfg.Contexts["in-cluster"] = &clientcmdapi.Context{Cluster: "in-cluster", AuthInfo: "serviceaccount"}
	cfg.CurrentContext = "in-cluster"
	return clientcmd.Write(*cfg)
}
