#!/usr/bin/env bash
# The supervisor of one real node. realcluster starts it inside the cluster's network namespace and in a private
# mount namespace of its own:
#   nsenter --net=/run/netns/<netns> -- unshare --mount --propagation private -- bash node.sh
# Everything below runs from this one shell, so every daemon shares the two namespaces, and every mount made here
# disappears with the last process of this mount namespace. Its environment (set by realcluster):
#   DIR        the cluster's work folder (config/, pki/, logs/, state folders)
#   BIN        the folder of etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy
#   CGROUP     the cgroup (in every v1 hierarchy) the daemons join; kubelet puts pods under $CGROUP/pods
#   OWNER      the pid of the program that started us: when it is gone, the node stops by itself
#   SA_ISSUER  the issuer of the ServiceAccount tokens the kube-apiserver signs
set -uo pipefail

log() { echo "node: $*" >&2; }

# 1. Cover the places the tools write to whatever they are told (real-nodes.md, blocker 7) with folders of our own,
#    and make the kernel settings the kubelet insists on read as it wants them, in this mount namespace only
#    (blocker 6): the machine keeps its own values.
for d in run var-lib var-log; do mkdir -p "$DIR/root/$d"; done
mount --bind "$DIR/root/run" /run
mount --bind "$DIR/root/var-lib" /var/lib
mount --bind "$DIR/root/var-log" /var/log
mkdir -p "$DIR/root/sysctl"
while read -r key value; do
  echo "$value" >"$DIR/root/sysctl/$key"
  mount --bind "$DIR/root/sysctl/$key" "/proc/sys/${key//.//}"
done <<'EOF'
vm.overcommit_memory 1
kernel.panic 10
kernel.panic_on_oops 1
EOF

# 2. The node's network: forwarding for the pods, and the service range routed to the pods' bridge so a ClusterIP is
#    reachable from the node itself (blocker 4). Both live in this network namespace only.
echo 1 >/proc/sys/net/ipv4/ip_forward
ip link set lo up
ip link add cni0 type bridge 2>/dev/null || true
ip addr add "$POD_GATEWAY/24" dev cni0 2>/dev/null || true
ip link set cni0 up
ip route replace "$SERVICE_CIDR" dev cni0

# 3. Every daemon joins $CGROUP.node in the pids and memory hierarchies, so it can be counted, measured and ended.
for h in pids memory; do
  mkdir -p "/sys/fs/cgroup/$h/$CGROUP.node"
  echo $$ >"/sys/fs/cgroup/$h/$CGROUP.node/cgroup.procs"
done

declare -A pids
start() {
  local name=$1; shift
  "$@" >>"$DIR/logs/$name.log" 2>&1 &
  pids[$name]=$!
}

stopping=""
stop() {
  [ -n "$stopping" ] && return
  stopping=1
  # The kubelet first, so it starts nothing more; then the pods (by cgroup: realcluster ends what is left), then the
  # control plane and the runtime, etcd last.
  for name in kubelet kube-proxy kube-scheduler kube-controller-manager kube-apiserver containerd etcd; do
    local pid=${pids[$name]:-}
    [ -n "$pid" ] || continue
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
    if [ "$name" = kubelet ]; then
      for p in $(find "/sys/fs/cgroup/pids/$CGROUP" -name cgroup.procs -exec cat {} + 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    fi
  done
  # Whatever else shares this mount namespace (containerd's shims) goes too.
  local self
  self=$(readlink /proc/$$/ns/mnt)
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    [ "$p" = $$ ] && continue
    [ "$(readlink "/proc/$p/ns/mnt" 2>/dev/null)" = "$self" ] && kill -KILL "$p" 2>/dev/null
  done
  wait 2>/dev/null
  log "stopped"
  exit 0
}
trap stop TERM INT

start etcd "$BIN/etcd" --name node --data-dir "$DIR/etcd" \
  --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster node=http://127.0.0.1:2380 --listen-metrics-urls "" --log-level warn \
  --quota-backend-bytes 2147483648 --unsafe-no-fsync

start containerd containerd --config "$DIR/config/containerd.toml"

# The audit log records who did what, as a production control plane's does: every request at Metadata level (user,
# impersonated user, verb, resource, name, response code), without the components' own chatter. On the hub it shows
# who reached which managed cluster through the aggregated API; on a managed cluster, as whom.
cat >"$DIR/config/audit-policy.yaml" <<'POLICY'
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  userGroups: [system:nodes]
- level: None
  users: [system:kube-proxy, system:kube-scheduler, system:kube-controller-manager, system:apiserver]
- level: None
  resources: [{group: coordination.k8s.io, resources: [leases]}, {group: "", resources: [events]}, {group: events.k8s.io}]
- level: None
  nonResourceURLs: ["/healthz*", "/readyz*", "/livez*", "/version", "/openapi*", "/api", "/apis", "/metrics"]
- level: Metadata
POLICY

# Tokens signed before a change of issuer, and in-cluster clients' expectations, keep the default issuer valid.
issuers=(--service-account-issuer "$SA_ISSUER")
default_issuer=https://kubernetes.default.svc.cluster.local
[ "$SA_ISSUER" = "$default_issuer" ] || issuers+=(--service-account-issuer "$default_issuer")
start kube-apiserver "$BIN/kube-apiserver" \
  --etcd-servers http://127.0.0.1:2379 \
  --bind-address 0.0.0.0 --secure-port 6443 --advertise-address "$NODE_IP" \
  --service-cluster-ip-range "$SERVICE_CIDR" \
  --tls-cert-file "$DIR/pki/apiserver.crt" --tls-private-key-file "$DIR/pki/apiserver.key" \
  --client-ca-file "$DIR/pki/ca.crt" \
  --kubelet-client-certificate "$DIR/pki/apiserver-kubelet-client.crt" --kubelet-client-key "$DIR/pki/apiserver-kubelet-client.key" \
  --requestheader-client-ca-file "$DIR/pki/front-proxy-ca.crt" --requestheader-allowed-names front-proxy-client \
  --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
  --requestheader-extra-headers-prefix X-Remote-Extra- \
  --proxy-client-cert-file "$DIR/pki/front-proxy-client.crt" --proxy-client-key-file "$DIR/pki/front-proxy-client.key" \
  "${issuers[@]}" \
  --service-account-key-file "$DIR/pki/sa.pub" --service-account-signing-key-file "$DIR/pki/sa.key" \
  --authorization-mode Node,RBAC --allow-privileged=true --profiling=false \
  --audit-policy-file "$DIR/config/audit-policy.yaml" --audit-log-path "$DIR/logs/audit.log" \
  --audit-log-maxsize 200 --audit-log-maxbackup 2 \
  --kubelet-preferred-address-types InternalIP \
  --enable-admission-plugins NodeRestriction

# The controllers give up when the kube-apiserver refuses them before its RBAC is in place: they start once it is ready.
for _ in $(seq 600); do
  "$BIN/kubectl" --kubeconfig "$DIR/config/kube-controller-manager.kubeconfig" get --raw /readyz >/dev/null 2>&1 && break
  kill -0 "${pids[kube-apiserver]}" 2>/dev/null || { log "the kube-apiserver ended"; stop; }
  sleep 0.2
done

start kube-controller-manager "$BIN/kube-controller-manager" \
  --kubeconfig "$DIR/config/kube-controller-manager.kubeconfig" \
  --authentication-kubeconfig "$DIR/config/kube-controller-manager.kubeconfig" \
  --authorization-kubeconfig "$DIR/config/kube-controller-manager.kubeconfig" \
  --bind-address 127.0.0.1 --leader-elect=false --use-service-account-credentials \
  --cluster-signing-cert-file "$DIR/pki/ca.crt" --cluster-signing-key-file "$DIR/pki/ca.key" \
  --root-ca-file "$DIR/pki/ca.crt" --service-account-private-key-file "$DIR/pki/sa.key" \
  --controllers '*,-bootstrapsigner,-tokencleaner' --profiling=false

start kube-scheduler "$BIN/kube-scheduler" \
  --kubeconfig "$DIR/config/kube-scheduler.kubeconfig" \
  --authentication-kubeconfig "$DIR/config/kube-scheduler.kubeconfig" \
  --authorization-kubeconfig "$DIR/config/kube-scheduler.kubeconfig" \
  --bind-address 127.0.0.1 --leader-elect=false --profiling=false

start kubelet "$BIN/kubelet" --config "$DIR/config/kubelet.yaml" \
  --kubeconfig "$DIR/config/kubelet.kubeconfig" --root-dir /var/lib/kubelet \
  --hostname-override "$NODE_NAME" --node-ip "$NODE_IP"

start kube-proxy "$BIN/kube-proxy" --config "$DIR/config/kube-proxy.yaml"

# Stop when the program that started us is gone (even SIGKILLed); it ends what it started, but it may not get to.
while kill -0 "$OWNER" 2>/dev/null; do
  sleep 1 &
  wait $! 2>/dev/null
done
log "owner $OWNER is gone"
stop
