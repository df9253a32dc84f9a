package realcluster

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/kubeclient"
)

// corefile serves the cluster's names and hosts (name → address); nothing is forwarded: there is no upstream.
func corefile(hosts map[string]string) string {
	var b strings.Builder
	b.WriteString(".:53 {\n    errors\n    health :8080\n    ready :8181\n")
	if len(hosts) > 0 {
		b.WriteString("    hosts {\n")
		for _, name := range slices.Sorted(maps.Keys(hosts)) {
			fmt.Fprintf(&b, "        %s %s\n", hosts[name], name)
		}
		b.WriteString("        fallthrough\n    }\n")
	}
	b.WriteString("    kubernetes cluster.local in-addr.arpa ip6.arpa {\n        pods insecure\n        fallthrough in-addr.arpa ip6.arpa\n    }\n")
	b.WriteString("    cache 30\n    loop\n    reload\n}\n")
	return b.String()
}

// deployCoreDNS creates kube-dns as kubeadm would: a ServiceAccount with read access to services and endpoints, the
// Corefile, a Deployment and the Service at DNSServiceIP.
func (c *Cluster) deployCoreDNS(ctx context.Context) error {
	cl, err := client.New(c.Config, client.Options{})
	if err != nil {
		return err
	}
	ns := metav1.NamespaceSystem
	labels := map[string]string{"k8s-app": "kube-dns"}
	meta := metav1.ObjectMeta{Name: "coredns", Namespace: ns, Labels: labels}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
	}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "system:coredns"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:coredns"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "coredns", Namespace: ns}}}
	config := &corev1.ConfigMap{ObjectMeta: meta, Data: map[string]string{"Corefile": corefile(c.opts.CoreDNSHosts)}}
	probe := func(path string, port int) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(int32(port))}}, PeriodSeconds: 2}
	}
	deploy := &appsv1.Deployment{ObjectMeta: meta, Spec: appsv1.DeploymentSpec{
		Selector: &metav1.LabelSelector{MatchLabels: labels},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{
			ServiceAccountName: "coredns",
			DNSPolicy:          corev1.DNSDefault,
			PriorityClassName:  "system-cluster-critical",
			Containers: []corev1.Container{{
				Name: "coredns", Image: coreDNSImage, ImagePullPolicy: corev1.PullNever,
				Args: []string{"-conf", "/etc/coredns/Corefile"},
				Ports: []corev1.ContainerPort{
					{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
					{Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP},
				},
				ReadinessProbe: probe("/ready", 8181),
				LivenessProbe:  probe("/health", 8080),
				VolumeMounts:   []corev1.VolumeMount{{Name: "config", MountPath: "/etc/coredns", ReadOnly: true}},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					ReadOnlyRootFilesystem:   ptr.To(true),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: []corev1.Capability{"NET_BIND_SERVICE"}},
				},
			}},
			Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "coredns"}}}}},
		}},
	}}
	service := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: ns, Labels: labels}, Spec: corev1.ServiceSpec{
		ClusterIP: DNSServiceIP, Selector: labels,
		Ports: []corev1.ServicePort{
			{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
			{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP},
		},
	}}
	if err := kubeclient.CreateAll(ctx, cl, &corev1.ServiceAccount{ObjectMeta: meta}, role, binding, config, deploy, service); err != nil {
		return fmt.Errorf("deploy CoreDNS: %w", err)
	}
	return nil
}
