package managedproxyconfiguration

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	proxyv1alpha1 "github.com/cluster-proxy-operator/cluster-proxy-operator/api/v1alpha1"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/contract"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/apply"
	"github.com/cluster-proxy-operator/cluster-proxy-operator/internal/hub/render"
)

// providedSignerRecheck is how often a user-provided CA secret, which the cache does not watch, is re-read: a
// replaced secret starts its rollover within it. One uncached GET per Provided configuration.
const providedSignerRecheck = 30 * time.Second

// notReadyRecheck is how often an unusable signer secret is re-read; a user fixing it should not wait long.
const notReadyRecheck = 10 * time.Second

// reconcileNamespace creates the proxy-server namespace when it is missing. The cache holds only the namespaces the
// operator created (a hub has one per managed cluster); one it did not create, such as Helm's, is looked up on the API
// server.
func (r *Reconciler) reconcileNamespace(ctx context.Context, s *scope) (ctrl.Result, error) {
	ns := &corev1.Namespace{}
	key := types.NamespacedName{Name: contract.Namespace(s.mpc)}
	err := r.Client.Get(ctx, key, ns)
	if apierrors.IsNotFound(err) {
		err = r.APIReader.Get(ctx, key, ns)
	}
	if apierrors.IsNotFound(err) {
		err = r.Client.Create(ctx, render.ServerNamespace(s.mpc))
		if apierrors.IsAlreadyExists(err) {
			err = nil
		}
	}
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("ensure namespace %s: %w", contract.Namespace(s.mpc), err)
	}
	return ctrl.Result{}, nil
}

// reconcileEntrypoint keeps the LoadBalancer Service (for that entrypoint type) and resolves the address agents dial.
func (r *Reconciler) reconcileEntrypoint(ctx context.Context, s *scope) (ctrl.Result, error) {
	mpc := s.mpc
	lb := render.LoadBalancerService(mpc)
	if render.EntrypointType(mpc) != proxyv1alpha1.EntryPointTypeLoadBalancerService {
		if err := r.deleteOwned(ctx, lb); err != nil {
			return ctrl.Result{}, err
		}
		s.entryHost = render.EntrypointHost(mpc, "")
		reason := proxyv1alpha1.ReasonEntrypointResolved
		if render.EntrypointType(mpc) == proxyv1alpha1.EntryPointTypePortForward {
			reason = proxyv1alpha1.ReasonPortForwardEntrypoint
		}
		s.status.Entrypoint = fmt.Sprintf("%s:%d", s.entryHost, render.EntrypointPort(mpc))
		setCondition(s.status, mpc.Generation, proxyv1alpha1.ConditionEntrypointReady, true, reason, "agents dial "+s.status.Entrypoint)
		return ctrl.Result{}, nil
	}
	if _, err := apply.Ensure(ctx, r.Client, lb); err != nil {
		return ctrl.Result{}, err
	}
	live := &corev1.Service{}
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(lb), live); client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, err
	}
	s.entryHost = render.EntrypointHost(mpc, render.LoadBalancerAddress(live))
	if s.entryHost == "" {
		s.status.Entrypoint = ""
		setCondition(s.status, mpc.Generation, proxyv1alpha1.ConditionEntrypointReady, false, proxyv1alpha1.ReasonLoadBalancerPending,
			fmt.Sprintf("waiting for an ingress hostname or IP on LoadBalancer Service %s/%s", lb.Namespace, lb.Name))
		return ctrl.Result{}, nil // the Service's status update triggers the next pass
	}
	s.status.Entrypoint = fmt.Sprintf("%s:%d", s.entryHost, render.EntrypointPort(mpc))
	setCondition(s.status, mpc.Generation, proxyv1alpha1.ConditionEntrypointReady, true, proxyv1alpha1.ReasonEntrypointResolved, "agents dial "+s.status.Entrypoint)
	return ctrl.Result{}, nil
}

// reconcileCertificates keeps one ProxyCertificate per hub certificate and reports each as a *SecretSigned condition.
func (r *Reconciler) reconcileCertificates(ctx context.Context, s *scope) (ctrl.Result, error) {
	for _, hc := range render.HubCertificates(s.mpc, s.entryHost) {
		if _, err := apply.Ensure(ctx, r.Client, hc.Certificate); err != nil {
			return ctrl.Result{}, err
		}
		live := &proxyv1alpha1.ProxyCertificate{}
		if err := r.Client.Get(ctx, client.ObjectKeyFromObject(hc.Certificate), live); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, err
		}
		setSecretSignedCondition(s.status, s.mpc.Generation, hc.Condition, live)
	}
	return ctrl.Result{}, nil
}

// setSecretSignedCondition mirrors a ProxyCertificate's readiness (for the certificate it currently asks for).
func setSecretSignedCondition(status *proxyv1alpha1.ManagedProxyConfigurationStatus, generation int64, conditionType string, pc *proxyv1alpha1.ProxyCertificate) {
	ready := meta.FindStatusCondition(pc.Status.Conditions, proxyv1alpha1.ConditionReady)
	switch {
	case ready != nil && ready.Status == metav1.ConditionTrue && ready.ObservedGeneration == pc.Generation && pc.Status.NotAfter != nil:
		setCondition(status, generation, conditionType, true, proxyv1alpha1.ReasonSuccessfullySigned,
			fmt.Sprintf("Expiry: %s", pc.Status.NotAfter.UTC().Format(time.RFC3339)))
	case ready != nil && ready.Status == metav1.ConditionFalse:
		setCondition(status, generation, conditionType, false, proxyv1alpha1.ReasonNotYetSigned,
			fmt.Sprintf("secret %s: %s", pc.Spec.SecretName, ready.Message))
	default:
		setCondition(status, generation, conditionType, false, proxyv1alpha1.ReasonNotYetSigned,
			fmt.Sprintf("secret %s is waiting to be issued", pc.Spec.SecretName))
	}
}

// serverPods are the names of mpc's proxy-server pods (cached: the manager watches the proxy-server pods only).
func (r *Reconciler) serverPods(ctx context.Context, mpc *proxyv1alpha1.ManagedProxyConfiguration) ([]string, error) {
	list := &corev1.PodList{}
	if err := r.Client.List(ctx, list, client.InNamespace(contract.Namespace(mpc)), client.MatchingLabels(render.ServerPodLabels(mpc))); err != nil {
		return nil, fmt.Errorf("list the proxy-server pods: %w", err)
	}
	names := make([]string, 0, len(list.Items))
	for _, p := range list.Items {
		names = append(names, p.Name)
	}
	return names, nil
}

// reconcileServer keeps the proxy-server ServiceAccount, Services, RBAC, Deployment and PodDisruptionBudget.
func (r *Reconciler) reconcileServer(ctx context.Context, s *scope) (ctrl.Result, error) {
	mpc := s.mpc
	desired := []client.Object{render.ServerServiceAccount(mpc), render.InClusterService(mpc), render.UserServerService(mpc)}
	for _, o := range render.ServerHubRBAC(mpc) {
		desired = append(desired, o)
	}
	portForward := render.EntrypointType(mpc) == proxyv1alpha1.EntryPointTypePortForward
	var pods []string
	if portForward {
		var err error
		if pods, err = r.serverPods(ctx, mpc); err != nil {
			return ctrl.Result{}, err
		}
	}
	role, binding := render.PortForwardRBAC(mpc, pods)
	if portForward {
		desired = append(desired, role, binding)
	} else {
		for _, o := range []client.Object{role, binding} {
			if err := r.deleteOwned(ctx, o); err != nil {
				return ctrl.Result{}, err
			}
		}
	}
	if policy := render.ServerNetworkPolicy(mpc); render.NetworkPoliciesEnabled(mpc) {
		desired = append(desired, policy)
	} else if err := r.deleteOwned(ctx, policy); err != nil {
		return ctrl.Result{}, err
	}
	deployment := render.ServerDeployment(mpc)
	render.AcceptAdoptedProxyClients(deployment, s.adoptedClients)
	if err := r.replaceForeignDeployment(ctx, mpc, deployment); err != nil {
		return ctrl.Result{}, err
	}
	// A drain then takes one proxy-server replica at a time, and never blocks on a single one.
	desired = append(desired, deployment, render.ServerPodDisruptionBudget(mpc))
	for _, o := range desired {
		wrote, err := apply.Ensure(ctx, r.Client, o)
		if err != nil {
			setCondition(s.status, mpc.Generation, proxyv1alpha1.ConditionProxyServerDeployed, false, proxyv1alpha1.ReasonNotYetDeployed, err.Error())
			return ctrl.Result{}, err
		}
		if wrote && o == client.Object(deployment) {
			r.Recorder.Eventf(mpc, nil, corev1.EventTypeNormal, "ProxyServerUpdated", "Apply", "Deployment %s/%s applied", deployment.Namespace, deployment.Name)
		}
	}
	live := &appsv1.Deployment{}
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(deployment), live); err != nil {
		setCondition(s.status, mpc.Generation, proxyv1alpha1.ConditionProxyServerDeployed, false, proxyv1alpha1.ReasonNotYetDeployed,
			fmt.Sprintf("Deployment %s/%s is not visible yet", deployment.Namespace, deployment.Name))
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	setCondition(s.status, mpc.Generation, proxyv1alpha1.ConditionProxyServerDeployed, true, proxyv1alpha1.ReasonSuccessfullyDeployed,
		fmt.Sprintf("Replicas: %d desired, %d ready", mpc.Spec.ProxyServer.Replicas, live.Status.ReadyReplicas))
	return ctrl.Result{}, nil
}

// replaceForeignDeployment deletes the Deployment of desired's name that the operator did not write and whose pod
// selector is not the one desired renders (the existing add-on's proxy-server, which selects its pods by the component
// label alone): a selector cannot change, so it is replaced. Its pods go with it; agents of the add-on would be
// refused by the operator's proxy-servers anyway, and the operator's agents reach the new ones.
func (r *Reconciler) replaceForeignDeployment(ctx context.Context, mpc *proxyv1alpha1.ManagedProxyConfiguration, desired *appsv1.Deployment) error {
	live := &appsv1.Deployment{}
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(desired), live)
	if apierrors.IsNotFound(err) {
		err = r.APIReader.Get(ctx, client.ObjectKeyFromObject(desired), live)
	}
	if err != nil {
		return client.IgnoreNotFound(err)
	}
	if live.Spec.Selector != nil && equality.Semantic.DeepEqual(live.Spec.Selector, desired.Spec.Selector) {
		return nil
	}
	if err := r.Client.Delete(ctx, live, client.Preconditions{UID: &live.UID}, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete Deployment %s/%s, whose selector cannot become the operator's: %w", live.Namespace, live.Name, err)
	}
	if err := r.deleteForeignServerPods(ctx, live); err != nil {
		return err
	}
	r.Recorder.Eventf(mpc, nil, corev1.EventTypeNormal, "ProxyServerReplaced", "Delete",
		"Deployment %s/%s selected its pods by %v, which cannot change: deleted, to be created anew", live.Namespace, live.Name, live.Spec.Selector.MatchLabels)
	return nil
}

// deleteForeignServerPods deletes the pods of the replaced Deployment at once (a second's grace), rather than after
// their grace period: the add-on's proxy-server serves until it is killed, 30 s later, and trusts the same CA, so the
// operator's agents that reach it meanwhile stay on it and are missing from the operator's proxy-servers, where hub
// clients then find no tunnel. The operator's own proxy-server pods, which carry its configuration label, stay.
func (r *Reconciler) deleteForeignServerPods(ctx context.Context, replaced *appsv1.Deployment) error {
	selector, err := metav1.LabelSelectorAsSelector(replaced.Spec.Selector)
	if err != nil {
		return nil // no pods of its own to find
	}
	notOurs, err := labels.NewRequirement(render.ConfigurationLabel, selection.DoesNotExist, nil)
	if err != nil {
		return err
	}
	pods := &corev1.PodList{}
	if err := r.Client.List(ctx, pods, client.InNamespace(replaced.Namespace), client.MatchingLabelsSelector{Selector: selector.Add(*notOurs)}); err != nil {
		return err
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if err := r.Client.Delete(ctx, pod, client.Preconditions{UID: &pod.UID}, client.GracePeriodSeconds(1)); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
			return fmt.Errorf("delete pod %s/%s of the replaced Deployment %s: %w", pod.Namespace, pod.Name, replaced.Name, err)
		}
	}
	return nil
}

// reconcileAddOn registers the add-on with OCM and the aggregated API with the hub kube-apiserver, and deletes the hub TokenReview right agents had before hub users
// reached them as impersonation. Only the default configuration (cluster-proxy) owns it, because OCM knows one add-on
// named cluster-proxy.
func (r *Reconciler) reconcileAddOn(ctx context.Context, s *scope) (ctrl.Result, error) {
	if s.mpc.Name != proxyv1alpha1.DefaultConfigurationName {
		return ctrl.Result{}, nil
	}
	var opts []apply.Option
	for _, path := range render.CMAUserOwnedFields {
		opts = append(opts, apply.NotRendered(path...))
	}
	if _, err := apply.Ensure(ctx, r.Client, render.ClusterManagementAddOn(s.mpc), opts...); err != nil {
		return ctrl.Result{}, err
	}
	// One APIService names one Service, so the default configuration's proxy-servers serve the aggregated API.
	if len(s.bundle) > 0 {
		if _, err := apply.Ensure(ctx, r.Client, render.GatewayAPIService(s.mpc, s.bundle)); err != nil {
			return ctrl.Result{}, err
		}
	}
	if err := r.deleteOwned(ctx, render.RetiredAgentTokenReviewBinding(s.mpc)); err != nil {
		return ctrl.Result{}, err
	}
	return r.sweepAddOnLeftovers(ctx, s.mpc)
}

// leftoverRecheck is how soon the existing add-on's leftovers are looked for again after some were deleted: its
// manager, stopping during the switch, may write one once more.
const leftoverRecheck = 30 * time.Second

// sweepAddOnLeftovers deletes what the existing add-on leaves on the hub that the operator never writes and that would
// keep a right or a credential alive (render.AddOnLeftovers), until a pass of this manager finds none; then it stops
// looking, so a steady state sends no requests for them.
func (r *Reconciler) sweepAddOnLeftovers(ctx context.Context, mpc *proxyv1alpha1.ManagedProxyConfiguration) (ctrl.Result, error) {
	if r.swept.Load() {
		return ctrl.Result{}, nil
	}
	deleted := 0
	for _, o := range render.AddOnLeftovers(mpc) {
		switch err := r.Client.Delete(ctx, o); {
		case apierrors.IsNotFound(err):
		case err != nil:
			return ctrl.Result{}, fmt.Errorf("delete the existing add-on's %T %s: %w", o, client.ObjectKeyFromObject(o), err)
		default:
			deleted++
			r.Recorder.Eventf(mpc, nil, corev1.EventTypeNormal, "AddOnLeftoverDeleted", "Delete",
				"Deleted the existing add-on's %s %s, which the operator does not use", o.GetObjectKind().GroupVersionKind().Kind, client.ObjectKeyFromObject(o))
		}
	}
	if deleted == 0 {
		r.swept.Store(true)
		return ctrl.Result{}, nil
	}
	return ctrl.Result{RequeueAfter: leftoverRecheck}, nil
}

// deleteOwned deletes obj if it exists and is controlled by the configuration, so objects another owner keeps are
// never touched.
func (r *Reconciler) deleteOwned(ctx context.Context, obj client.Object) error {
	live := obj.DeepCopyObject().(client.Object)
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(obj), live); err != nil {
		return client.IgnoreNotFound(err)
	}
	owner := metav1.GetControllerOf(live)
	if owner == nil || owner.UID != obj.GetOwnerReferences()[0].UID {
		return nil
	}
	if err := r.Client.Delete(ctx, live); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete %T %s: %w", obj, client.ObjectKeyFromObject(obj), err)
	}
	return nil
}

// setReadyCondition summarises the other conditions.
func setReadyCondition(status *proxyv1alpha1.ManagedProxyConfigurationStatus, generation int64) {
	for _, t := range []string{
		proxyv1alpha1.ConditionSignerReady, proxyv1alpha1.ConditionEntrypointReady, proxyv1alpha1.ConditionProxyServerDeployed,
		proxyv1alpha1.ConditionProxyServerSecretSigned, proxyv1alpha1.ConditionAgentServerSecretSigned,
		proxyv1alpha1.ConditionProxyClientSecretSigned, proxyv1alpha1.ConditionUserServerSecretSigned,
		proxyv1alpha1.ConditionImpersonatorSecretSigned,
		proxyv1alpha1.ConditionTLSProfileApplied,
	} {
		c := meta.FindStatusCondition(status.Conditions, t)
		if c == nil {
			setCondition(status, generation, proxyv1alpha1.ConditionReady, false, "Pending", t+" is not reported yet")
			return
		}
		if c.Status != metav1.ConditionTrue {
			setCondition(status, generation, proxyv1alpha1.ConditionReady, false, c.Reason, t+": "+c.Message)
			return
		}
	}
	setCondition(status, generation, proxyv1alpha1.ConditionReady, true, proxyv1alpha1.ReasonAllComponentsReady, "proxy servers deployed and every certificate signed")
}
