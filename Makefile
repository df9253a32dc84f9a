# cluster-proxy-operator

# VERSION is the release: the image tag v$(VERSION), the chart's version and appVersion, the CSV's version
# (test/layout checks that they agree).
VERSION := $(shell cat VERSION)
IMG ?= quay.io/cluster-proxy-operator/cluster-proxy-operator:v$(VERSION)
BIN_DIR := $(CURDIR)/bin
export PATH := $(BIN_DIR):$(PATH)
# Every go command of make builds as the image's build step does: static (CGO_ENABLED=0) and with -trimpath. The
# tests, the binaries and the image then share one build configuration, so the Go build cache compiles each package
# once, and a clone in another folder finds its packages compiled.
export CGO_ENABLED := 0
export GOFLAGS := $(strip $(filter-out -trimpath,$(shell go env GOFLAGS)) -trimpath)

CONTROLLER_GEN_VERSION ?= v0.23.0
GOLANGCI_LINT_VERSION ?= v2.15.0
# The newest kustomize the Go proxy serves that builds with this Go (v5.8.3 needs go >= 1.27).
KUSTOMIZE_VERSION ?= v5.8.2
CONTROLLER_GEN := $(BIN_DIR)/controller-gen
OPENAPI_GEN := $(BIN_DIR)/openapi-gen
GOLANGCI_LINT := $(BIN_DIR)/golangci-lint
KUSTOMIZE := $(BIN_DIR)/kustomize
HELM_VERSION ?= v3.19.5
HELM := $(BIN_DIR)/helm
CHART_DIR := charts/cluster-proxy

# KUBEBUILDER_ASSETS is the folder envtest-assets prints (etcd, kube-apiserver, kube-controller-manager).
ENVTEST_ASSETS = $(shell hack/envtest-assets.sh)
# KUBEBUILDER_CONTROLPLANE_START_TIMEOUT is how long envtest waits for each kube-apiserver and etcd it starts to be
# ready (its default is 20 s). CI runs six suites side by side on two cores, and their API servers start together.
export KUBEBUILDER_CONTROLPLANE_START_TIMEOUT ?= 2m
# EVENTUALLY_TIMEOUT is how long an Eventually without its own timeout waits in make test (Gomega's default is 1s):
# the packages run side by side on two cores, and an agent's reconnect or a server's start can take longer there.
EVENTUALLY_TIMEOUT ?= 10s

.PHONY: all
all: build

##@ Development

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate CRDs and RBAC from the markers.
	$(CONTROLLER_GEN) rbac:roleName=cluster-proxy-manager crd:allowDangerousTypes=false paths="./api/..." paths="./controllers/..." \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	@$(MAKE) --no-print-directory helm-crds

.PHONY: helm-crds
helm-crds: ## Copy the generated CRDs, the manager ClusterRole and the leader-election Role into the Helm chart.
	rm -f $(CHART_DIR)/crds/*.yaml
	cp config/crd/bases/*.yaml $(CHART_DIR)/crds/
	cp config/rbac/role.yaml $(CHART_DIR)/files/manager-role.yaml
	cp config/rbac/leader_election_role.yaml $(CHART_DIR)/files/leader-election-role.yaml

.PHONY: generate
generate: $(CONTROLLER_GEN) $(OPENAPI_GEN) ## Generate deepcopy code and the aggregated API's OpenAPI definitions.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./api/..."
	$(OPENAPI_GEN) --go-header-file hack/boilerplate.go.txt --output-dir internal/server/gateway/openapi \
		--output-pkg $(shell go list -m)/internal/server/gateway/openapi --output-file zz_generated.openapi.go \
		--report-filename /dev/null k8s.io/apimachinery/pkg/apis/meta/v1 k8s.io/apimachinery/pkg/runtime \
		k8s.io/apimachinery/pkg/version ./api/gateway/v1alpha1

.PHONY: fmt
fmt: ## gofmt the code.
	go fmt ./...

.PHONY: vet
vet: ## go vet the code.
	go vet ./...

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run golangci-lint, then prove its import rules still catch a forbidden import of each kind (hack/depguard-probes.sh).
	$(GOLANGCI_LINT) run ./...
	@GOLANGCI_LINT=$(GOLANGCI_LINT) hack/depguard-probes.sh

.PHONY: bundle
bundle: manifests ## Generate the OLM bundle (bundle/, bundle.Dockerfile) from config/ with hack/bundle.
	go run ./hack/bundle

.PHONY: api-docs
api-docs: manifests ## Generate the API reference docs/api.md from the CRDs (hack/apidocs).
	go run ./hack/apidocs

.PHONY: verify-generated
verify-generated: manifests generate bundle api-docs tidy ## Fail when generated files (go.mod and go.sum included) are stale.
	@if [ -n "$$(git status --porcelain -- go.mod go.sum api config $(CHART_DIR) bundle bundle.Dockerfile docs/api.md internal/server/gateway/openapi)" ]; then \
		echo "Generated files are stale; run 'make manifests generate bundle api-docs tidy' and commit:"; \
		git status --porcelain -- go.mod go.sum api config $(CHART_DIR) bundle bundle.Dockerfile docs/api.md internal/server/gateway/openapi; git --no-pager diff --stat -- go.mod go.sum api config $(CHART_DIR) bundle bundle.Dockerfile docs/api.md internal/server/gateway/openapi; exit 1; fi

.PHONY: tidy
tidy: ## go mod tidy of the operator's module (hack/olm and hack/registry are tools' modules of their own).
	go mod tidy

# NODE_ASSETS is the same folder with what real nodes run too (kubelet, kube-scheduler, kube-proxy, coredns).
NODE_ASSETS = $(shell hack/envtest-assets.sh --nodes)
PAUSE := $(BIN_DIR)/pause

.PHONY: node-assets
node-assets: node-packages ## Build what real nodes run (the envtest assets plus kubelet, kube-scheduler, kube-proxy, CoreDNS, bin/pause) and install containerd, runc and the CNI plugins.
	@hack/envtest-assets.sh --nodes
	@CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o $(PAUSE) ./internal/localsystem/realcluster/pause

.PHONY: node-packages
node-packages: ## Install the Debian packages real nodes need (containerd, runc, CNI plugins, iptables, conntrack, socat) when missing.
	@command -v containerd >/dev/null && command -v runc >/dev/null && [ -x /usr/lib/cni/bridge ] && command -v iptables >/dev/null \
		&& command -v conntrack >/dev/null && command -v socat >/dev/null || \
		$(call APT_INSTALL,containerd runc containernetworking-plugins iptables conntrack socat)

.PHONY: test-nodes
test-nodes: node-assets curl ## Real clusters on this machine (internal/localsystem/realcluster): two side by side with pods, DNS, Services, logs and exec, nothing left after Stop or a killed run.
	NODE_ASSETS="$(NODE_ASSETS)" PAUSE="$(PAUSE)" go test -tags realcluster ./internal/localsystem/realcluster/... -count=1 -v -timeout 20m

.PHONY: envtest-assets
envtest-assets: ## Provide etcd and kube-apiserver for envtest (setup-envtest, else built from Go modules); prints the folder.
	@hack/envtest-assets.sh

# TEST_ALSO names more test targets for make test to run beside its own, after the code is generated (CI: test-nodes
# test-rbac test-integration).
TEST_ALSO ?=

.PHONY: test
test: manifests generate vet envtest-assets helm kustomize ocm-local promtool monitoring-crds ## Run unit and envtest suites (test/helm runs bin/helm against the prometheus-operator's CRDs too, test/kustomize runs bin/kustomize, test/monitoring runs promtool; the reconcilers on an OCM v1.2 hub and, side by side, on an OCM v1.0 one; the data plane again with poisoned buffers).
	@$(MAKE) --no-print-directory -j$(words test-packages test-ocm-v1.0 test-poison test-dashboards $(TEST_ALSO)) --output-sync=target \
		test-packages test-ocm-v1.0 test-poison test-dashboards $(TEST_ALSO)

# make test runs these side by side: the two envtest suites of the reconcilers spend most of their time waiting on
# their API servers, and the poisoned run is short.
.PHONY: test-packages
test-packages: envtest-assets ## Every package's tests (go test ./...), the reconcilers' envtest suite on an OCM v1.2 hub among them.
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" GOMEGA_DEFAULT_EVENTUALLY_TIMEOUT=$(EVENTUALLY_TIMEOUT) go test ./... -count=1 -timeout 30m

.PHONY: test-ocm-v1.0
test-ocm-v1.0: envtest-assets ## The reconcilers' envtest suite on a hub that serves the add-on API as v1alpha1 only, as OCM v1.0 does (make test runs it on OCM v1.2's CRDs and webhook).
	OCM_HUB_RELEASE=v1.0 KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" GOMEGA_DEFAULT_EVENTUALLY_TIMEOUT=$(EVENTUALLY_TIMEOUT) go test ./controllers/ -count=1 -timeout 30m

# DATA_PLANE_PACKAGES carry the bytes of every cluster through pooled, uncleared buffers.
DATA_PLANE_PACKAGES := ./internal/contract/... ./internal/server/... ./internal/agent/... ./pkg/...

.PHONY: test-poison
test-poison: envtest-assets ## The data plane's tests again with every released payload buffer overwritten and checked for a second release (-tags poisonbuffers): a buffer used after its release, or handed to two streams, fails them at once.
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" GOMEGA_DEFAULT_EVENTUALLY_TIMEOUT=$(EVENTUALLY_TIMEOUT) go test -tags poisonbuffers $(DATA_PLANE_PACKAGES) -count=1 -timeout 10m

# MONITORING_CRDS holds the prometheus-operator's CRDs, written from its API module (hack/prometheus-operator-crds).
MONITORING_CRDS := $(BIN_DIR)/monitoring-crds

.PHONY: monitoring-crds
monitoring-crds: $(CONTROLLER_GEN) ## Write the prometheus-operator's CRDs (monitoring.coreos.com/v1, from its API module v0.95.2) into bin/monitoring-crds: test/helm installs the chart's ServiceMonitor, PodMonitor and PrometheusRule against them.
	@cd hack/prometheus-operator-crds && $(abspath $(CONTROLLER_GEN)) crd:allowDangerousTypes=true \
		paths=github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1 output:crd:dir=$(abspath $(MONITORING_CRDS))

.PHONY: dashboards
dashboards: ## Write the chart's Grafana dashboards (charts/cluster-proxy/files/dashboards) from their code in hack/dashboards (its own module).
	cd hack/dashboards && go run .

.PHONY: test-dashboards
test-dashboards: ## The dashboards' tests: the chart's files are what hack/dashboards writes, every query parses as PromQL and names metrics of docs/metrics.md.
	cd hack/dashboards && go test ./... -count=1

.PHONY: test-integration
test-integration: envtest-assets squid curl tinyproxy ## Data plane as processes on 127.0.0.1: proxy-server, proxy-agent, kubectl, curl, squid and tinyproxy.
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" go test -tags integration ./test/integration/... -count=1 -timeout 30m -v -ginkgo.v

# E2E_PREREQUISITES are what the real-cluster suites run: the image, the node binaries, OCM, helm, squid and curl.
E2E_PREREQUISITES := build node-assets image ocm-local helm squid curl

.PHONY: e2e
e2e: $(E2E_PREREQUISITES) ## The product on real clusters (internal/localsystem): a hub and two managed clusters whose pods run (one behind squid over TLS, one digit-named), OCM as pods, helm install with 3 proxy-server replicas; real clients.
	NODE_ASSETS="$(NODE_ASSETS)" KUBEBUILDER_ASSETS="$(NODE_ASSETS)" go test -tags e2e ./test/e2e/... -count=1 -timeout 60m -v -ginkgo.v \
		-ginkgo.label-filter='!soak'
	NODE_ASSETS="$(NODE_ASSETS)" go test -tags e2e ./cmd/localsystem/ -count=1 -timeout 20m -v

.PHONY: e2e-olm
e2e-olm: $(E2E_PREREQUISITES) olm busybox build-static-platforms ## OLM installs the operator on the real clusters of make e2e: OLM v0.38.0 from its chart, bundle and catalog images of three releases pulled from a registry, a Subscription; install, upgrade through the channel with the tunnels up, a release that cannot install.
	NODE_ASSETS="$(NODE_ASSETS)" KUBEBUILDER_ASSETS="$(NODE_ASSETS)" go test -tags e2e ./test/e2e-olm/... -count=1 -timeout 60m -v -ginkgo.v

.PHONY: e2e-migrate
e2e-migrate: addon-source-given $(E2E_PREREQUISITES) ## From the existing OCM add-on to the operator on the real clusters of make e2e, not in CI: the add-on v0.11.0 built from ADDON_SOURCE (a checkout of its repository at that tag) and installed with its chart; then docs/migration.md's migration, rollback and migration again, with the add-on's clients in loops (figures per client kind).
	ADDON_SOURCE="$(abspath $(ADDON_SOURCE))" NODE_ASSETS="$(NODE_ASSETS)" KUBEBUILDER_ASSETS="$(NODE_ASSETS)" \
		go test -tags e2e ./test/e2e-migrate/... -count=1 -timeout 60m -v -ginkgo.v

# addon-source-given fails at once, before anything is built, when ADDON_SOURCE is missing.
.PHONY: addon-source-given
addon-source-given:
	@if [ ! -f "$(ADDON_SOURCE)/charts/cluster-proxy/Chart.yaml" ]; then \
		echo "ADDON_SOURCE is not a checkout of the add-on: give one, e.g. make e2e-migrate ADDON_SOURCE=../cluster-proxy" >&2; \
		echo "(git clone https://github.com/open-cluster-management-io/cluster-proxy && git -C cluster-proxy checkout v0.11.0)" >&2; \
		exit 2; \
	fi

##@ Build

.PHONY: build
build: generate ## Build the binaries into bin/.
	go build -o $(BIN_DIR)/manager ./cmd/manager
	go build -o $(BIN_DIR)/proxy-server ./cmd/proxy-server
	go build -o $(BIN_DIR)/proxy-agent ./cmd/proxy-agent
	go build -o $(BIN_DIR)/kubectl-cluster_proxy ./cmd/kubectl-cluster_proxy
	go build -o $(BIN_DIR)/localsystem ./cmd/localsystem

.PHONY: ocm-local
ocm-local: ## Build bin/ocm-local: the real OCM v1.2.0 hub components, add-on webhook and klusterlet agent (own Go module in hack/ocm; minutes cold, cached after).
	@hack/ocm-build.sh

.PHONY: olm
olm: ## Build bin/olm: Operator Lifecycle Manager v0.38.0 (olm, catalog, package-server, cpb), opm and OLM's chart (module hack/olm), distribution's registry and grpc_health_probe (module hack/registry); about ten minutes cold, cached after.
	@hack/olm-build.sh

.PHONY: run
run: build node-assets image ocm-local helm squid ## Start the whole product on real clusters (internal/localsystem): a hub and two managed clusters whose pods run, OCM as pods, helm install, squid as cluster1's only route (Ctrl-C stops and removes everything).
	NODE_ASSETS="$(NODE_ASSETS)" $(BIN_DIR)/localsystem

OUT ?= $(BIN_DIR)/static
.PHONY: build-static
build-static: ## Build the image's static binaries into OUT (the Dockerfile's build step; test/image runs it).
	CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o $(OUT)/ ./cmd/manager ./cmd/proxy-server ./cmd/proxy-agent ./cmd/kubectl-cluster_proxy

IMAGE_TAR ?= $(BIN_DIR)/image.tar
.PHONY: image
image: ## Write the image, tagged IMG, as a docker-archive tarball IMAGE_TAR (bin/image.tar) without a Docker engine; 'ctr -n k8s.io images import' loads it.
	$(MAKE) --no-print-directory build-static OUT=$(BIN_DIR)/static
	go run ./hack/image --binaries $(BIN_DIR)/static --tag $(IMG) --output $(IMAGE_TAR)

# PLATFORMS are the platforms of the multi-platform image; IMAGE_INDEX is where make image-index writes it (an OCI
# image layout), IMAGE where make image-push pushes it.
PLATFORMS ?= linux/amd64,linux/arm64
IMAGE_INDEX ?= $(BIN_DIR)/image-index
IMAGE ?= $(IMG)
comma := ,

.PHONY: build-static-platforms
build-static-platforms: ## Build the image's static binaries for each of PLATFORMS into bin/platforms/<os>_<arch>.
	@for p in $(subst $(comma), ,$(PLATFORMS)); do \
	  os=$${p%%/*}; arch=$${p#*/}; \
	  GOOS=$$os GOARCH=$$arch $(MAKE) --no-print-directory build-static OUT=$(BIN_DIR)/platforms/$${os}_$${arch} || exit 1; \
	done

.PHONY: image-index
image-index: build-static-platforms ## Write the multi-platform image (PLATFORMS, default linux/amd64 and linux/arm64) as an OCI image layout IMAGE_INDEX (bin/image-index).
	go run ./hack/image --platforms $(PLATFORMS) --binaries $(BIN_DIR)/platforms --layout $(IMAGE_INDEX)

# PUSH_INSECURE=true makes make image-push speak plain HTTP to a registry without TLS (a local one).
PUSH_INSECURE ?= false
.PHONY: image-push
image-push: build-static-platforms ## Push the multi-platform image to IMAGE (default IMG), with the credentials of the Docker config (docker login); PUSH_INSECURE=true for a registry without TLS.
	go run ./hack/image --platforms $(PLATFORMS) --binaries $(BIN_DIR)/platforms --push $(IMAGE) $(if $(filter true,$(PUSH_INSECURE)),--insecure)

.PHONY: docker-build
docker-build: ## Build the container image (needs a Docker engine; its build step is make build-static).
	docker build -t $(IMG) .

##@ Tools

# Debian packages some targets run, installed with apt-get (through sudo unless root) when missing. One install at a
# time (flock): targets of a make -j that each need a package wait for each other instead of failing on apt's lock.
APT_INSTALL = { echo "installing $(1) with apt-get"; S=""; [ "$$(id -u)" = 0 ] || S=sudo; \
	$$S flock /tmp/.cluster-proxy-operator-apt.lock sh -c \
		'apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $(1) >/dev/null'; }

.PHONY: squid
squid: ## Install squid-openssl (the forward proxy of make run and make e2e) when it is missing.
	@command -v squid >/dev/null || [ -x /usr/sbin/squid ] || $(call APT_INSTALL,squid-openssl)

.PHONY: promtool
promtool: ## Install Debian's prometheus (promtool checks and unit-tests the alerts in test/monitoring) when it is missing.
	@command -v promtool >/dev/null || $(call APT_INSTALL,prometheus)

.PHONY: tinyproxy
tinyproxy: ## Install tinyproxy (a forward proxy of make test-integration) when it is missing.
	@command -v tinyproxy >/dev/null || [ -x /usr/bin/tinyproxy ] || $(call APT_INSTALL,tinyproxy)

.PHONY: busybox
busybox: ## Install busybox-static (the cp of OLM's bundle-unpack Jobs in make e2e-olm) when it is missing.
	@[ -x /bin/busybox ] || $(call APT_INSTALL,busybox-static)

.PHONY: curl
curl: ## Install curl (a client of make e2e) when it is missing.
	@command -v curl >/dev/null || $(call APT_INSTALL,curl)

$(CONTROLLER_GEN):
	GOBIN=$(BIN_DIR) go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)

# openapi-gen at the kube-openapi version the module requires, so the definitions match the library that serves them.
$(OPENAPI_GEN): go.mod
	GOBIN=$(BIN_DIR) go install k8s.io/kube-openapi/cmd/openapi-gen@$$(go list -m -f '{{.Version}}' k8s.io/kube-openapi)

.PHONY: helm
helm: ## Install bin/helm (HELM_VERSION, used by the chart tests in test/helm); reinstalled when bin/helm is another version.
	@[ -x $(HELM) ] && [ "$$(go version -m $(HELM) 2>/dev/null | awk '$$1=="mod" {print $$3}')" = "$(HELM_VERSION)" ] || \
		GOBIN=$(BIN_DIR) go install helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

.PHONY: test-helm
test-helm: helm envtest-assets monitoring-crds ## Chart tests only: lint, golden renders, schema, apply to an envtest hub (and one with the prometheus-operator's CRDs) (-update regenerates goldens: make test-helm HELM_TEST_ARGS=-update).
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" go test ./test/helm/... -count=1 -v $(if $(HELM_TEST_ARGS),-args $(HELM_TEST_ARGS))

$(GOLANGCI_LINT):
	GOBIN=$(BIN_DIR) go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

.PHONY: kustomize
kustomize: ## Install bin/kustomize (KUSTOMIZE_VERSION); reinstalled when bin/kustomize is another version.
	@[ -x $(KUSTOMIZE) ] && [ "$$($(KUSTOMIZE) version 2>/dev/null)" = "$(KUSTOMIZE_VERSION)" ] || \
		GOBIN=$(BIN_DIR) go install sigs.k8s.io/kustomize/kustomize/v5@$(KUSTOMIZE_VERSION)

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z0-9_.-]+:.*?##/ { printf "  %-18s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)

##@ Benchmarks

.PHONY: bench-control-plane
bench-control-plane: envtest-assets $(if $(filter ocm,$(BENCH_HUB)),ocm-local) ## 1,000 managed clusters on an envtest hub: convergence, CPU and writes per cluster, peak RSS, steady-state requests (BENCH_CLUSTERS=1000,5000,10000, BENCH_MEMORY_LIMIT=256Mi, BENCH_STEADY=60s, BENCH_HUB=ocm for OCM v1.2 with its add-on manager, BENCH_OUT, BENCH_PROFILE_DIR=dir).
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" go test -tags bench ./test/bench/controlplane -run '^TestControlPlaneScale$$' -count=1 -v -timeout 90m

.PHONY: bench-control-plane-vs-addon
bench-control-plane-vs-addon: addon-manager-given envtest-assets ocm-local ## The existing OCM addon's manager and ours, each on a new OCM v1.2 hub with OCM's add-on manager and the same 1,000 clusters, figures side by side with their ratios (ADDON_MANAGER=path of its addon-manager, built from cluster-proxy v0.11.0; BENCH_CLUSTERS, BENCH_REPEAT, BENCH_STEADY, BENCH_MEMORY_LIMIT, BENCH_OUT, BENCH_PROFILE_DIR).
	BENCH_ADDON_MANAGER="$(abspath $(ADDON_MANAGER))" KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" go test -tags bench ./test/bench/controlplane -run '^TestControlPlaneVersusAddon$$' -count=1 -v -timeout 180m

# addon-manager-given fails at once, before anything is built, when ADDON_MANAGER is missing.
.PHONY: addon-manager-given
addon-manager-given:
	@if [ -z "$(ADDON_MANAGER)" ]; then \
		echo "ADDON_MANAGER is not set: give the path of the existing addon's manager, e.g. make bench-control-plane-vs-addon ADDON_MANAGER=../cluster-proxy/addon-manager" >&2; \
		echo "(clone https://github.com/open-cluster-management-io/cluster-proxy, check out v0.11.0, run 'go build -mod=vendor ./cmd/addon-manager' in it)" >&2; \
		exit 2; \
	fi

.PHONY: test-rbac
test-rbac: envtest-assets ## The manager as deployed (its ServiceAccount, the rules of config/rbac, a token) brings 20 clusters to convergence and a steady state without writes or GETs, and RBAC denies it nothing: the shipped least-privilege rules suffice.
	BENCH_CLUSTERS=20 BENCH_STEADY=5s BENCH_IDENTITY=serviceaccount $(MAKE) --no-print-directory bench-control-plane

.PHONY: bench-fleet
bench-fleet: ## Simulated agents (the product's, own certificates, real mTLS gRPC) against one proxy-server: memory per idle agent, tunnel-health CPU per round next to the previous design, a proxy-server restart (BENCH_AGENTS=1000,10000, BENCH_ROUNDS, BENCH_IDLE, BENCH_OUT).
	go test -tags bench ./test/bench/fleet -run '^TestFleet$$' -count=1 -v -timeout 60m

# SOAK_DURATION is how long make soak injects faults (a Go duration in h, m and s); SOAK_SEED draws them (empty: from
# the clock, printed, so a run can be drawn again); SOAK_OUT is where the report goes, its plot beside it (.svg).
SOAK_DURATION ?= 10m
SOAK_SEED ?=
SOAK_OUT ?= $(BIN_DIR)/soak.json
# SOAK_TIMEOUT is SOAK_DURATION and 40 minutes more, for the system's start, the faults still recovering at the end,
# the settling and the report; empty when SOAK_DURATION is not written in h, m and s.
SOAK_TIMEOUT = $(shell echo '$(SOAK_DURATION)' | awk '{ d = $$0; s = 0; \
	while (match(d, /^[0-9]+(\.[0-9]+)?[hms]/)) { u = substr(d, RLENGTH, 1); s += substr(d, 1, RLENGTH - 1) * (u == "h" ? 3600 : u == "m" ? 60 : 1); d = substr(d, RLENGTH + 1) } \
	if (d == "" && s > 0) printf "%ds", s + 2400 }')

.PHONY: soak
soak: $(E2E_PREREQUISITES) ## Random faults under load on the real clusters of make e2e, not in CI: every 5-25 s one of 12 kinds (pods deleted or SIGKILLed, rolling updates, squid, leaf and CA rotations, a cluster's network cut), at most 2 at once, each waiting for recovery; streams replaced as they end and probed for hangs every minute; a report of failed requests and stream ends against faults, hung streams, recovery, the manager's Events, goroutines and memory, end state (SOAK_DURATION=10m, SOAK_SEED, SOAK_OUT=bin/soak.json and .svg).
	@[ -n "$(SOAK_TIMEOUT)" ] || { echo "SOAK_DURATION=$(SOAK_DURATION): write it in h, m and s, e.g. 10m or 1h30m" >&2; exit 2; }
	SOAK_DURATION="$(SOAK_DURATION)" SOAK_SEED="$(SOAK_SEED)" SOAK_OUT="$(abspath $(SOAK_OUT))" NODE_ASSETS="$(NODE_ASSETS)" \
		KUBEBUILDER_ASSETS="$(NODE_ASSETS)" go test -tags e2e ./test/e2e/... -count=1 -timeout $(SOAK_TIMEOUT) -v -ginkgo.v \
		-ginkgo.timeout=$(SOAK_TIMEOUT) -ginkgo.label-filter=soak

.PHONY: bench-data-plane
bench-data-plane: envtest-assets ## Data plane next to a raw apiserver-network-proxy tunnel, one process on 127.0.0.1 (and a kube-apiserver for the hub's aggregated path): bulk, latency, 64 clients, 1,000 streams, upload, bounds (slow readers, made-up tokens) (BENCH_PHASES, BENCH_MODES narrow it; BENCH_OUT).
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" go test -tags bench ./test/bench/dataplane -run '^TestDataPlane$$' -count=1 -v -timeout 30m
