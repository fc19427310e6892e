# nri-cni — see `make help`.
GO      ?= go
BIN     := bin/nri-cni
BIN_K8S := bin/nri-cni-k8s
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/nri-cni/nri-cni/cmd/internal/cli.version=$(VERSION)
# grpcnotrace: gRPC (the DRA kubelet plugin) without golang.org/x/net/trace,
# whose html/template would double nri-cni-k8s (see test/deploy/arch_test.go).
TAGS    := grpcnotrace
# Packages without root-only tests (fast tier).
UNIT_PKGS = $(shell $(GO) list ./... | grep -v /test/)
ALL_PKGS  = $(shell $(GO) list ./...)
# Packages that each start a single-node Kubernetes: run one at a time (after
# the rest), so each sees the host state it alone changes and restores.
K8S_PKGS  = $(addprefix github.com/nri-cni/nri-cni/test/,cluster k8s k8scrio kubeapi)

.DEFAULT_GOAL := help
.PHONY: help build tools lint test test-unit test-integration e2e e2e-k8s demo demo-k8s soak bench clean

help: ## List the targets.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-18s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: ## Build bin/nri-cni (the node's binary: no API client) and bin/nri-cni-k8s (with Kubernetes mode), static.
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/nri-cni
	CGO_ENABLED=0 $(GO) build -trimpath -tags $(TAGS) -ldflags '$(LDFLAGS)' -o $(BIN_K8S) ./cmd/nri-cni-k8s

# Each command installs the pinned components it needs and nothing else
# (test/tools/install.sh COMPONENT...: built once into ~/.cache/nri-cni/tools,
# keyed by version; later runs only check stamps). The first line it prints
# names them and the command that needs them. (Its KEY=DIR lines are for
# the Go harness.)
install_tools = @bash test/tools/install.sh --for 'make $@' $(1) >/dev/null
TOOLS_CONTAINERD := apt cni runtime
TOOLS_CRIO       := $(TOOLS_CONTAINERD) crio
TOOLS_K8S        := $(TOOLS_CRIO) k8s

tools: ## Install every pinned test component (what make test needs: CNI plugins, containerd, runc, CRI-O, Kubernetes, a v1.34.4 kube-apiserver, etcd, crictl, helm; apt when root).
	$(call install_tools,all)

lint: ## gofmt and go vet.
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
		if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# go test's default 10-minute limit per package is less than the Kubernetes
# tier takes on a loaded 2-core machine.
K8S_TIMEOUT ?= 40m

test: build lint ## Everything: unit tests (-race) and, as root, the privileged tests.
	$(call install_tools,all)
	$(GO) test -race -count=1 -timeout 20m $(filter-out $(K8S_PKGS),$(ALL_PKGS))
	$(GO) test -race -count=1 -p 1 -timeout $(K8S_TIMEOUT) $(K8S_PKGS)

test-unit: ## Unit tests only (no root needed).
	$(GO) test -race -count=1 $(UNIT_PKGS)

test-integration: ## Privileged tests: real netns, CNI plugins, NRI over a socket (root).
	$(call install_tools,$(TOOLS_CONTAINERD))
	$(GO) test -race -count=1 -v ./test/integration/

e2e: ## End-to-end tests against a real containerd 2.x and CRI-O 1.36 (both pid modes) + runc + CRI (root).
	$(call install_tools,$(TOOLS_CRIO))
	$(GO) test -count=1 -v ./test/e2e/

e2e-k8s: ## Kubernetes tier (root): kubelet + API server on containerd, then on CRI-O, nri-cni's image and deploy/base applied with kubectl, pods through the API; RBAC, policies and the chart against the API server (deploy/base-1.34 also against a v1.34.4 API server alone). K8S_VERSION=v1.34.4 for the oldest supported.
	$(call install_tools,$(TOOLS_K8S) k8s-apiserver helm)
	$(GO) test -count=1 -p 1 -timeout $(K8S_TIMEOUT) -v $(K8S_PKGS)

# The demos need root: say so before building anything. They are built like
# the tools (one line, the go tool's output in bin/<demo>.log), then run.
define demo_require_root
	@if [ "$$(id -u)" != 0 ]; then echo "make $@: run as root (it starts a private container runtime and creates network namespaces)" >&2; exit 1; fi
endef

demo: ## The main job in one command (root): containerd + nri-cni, two pods, ping over net1, teardown. Installs containerd, runc, CNI plugins only.
	$(demo_require_root)
	$(call install_tools,demo)
	@GO=$(GO) bash test/tools/gobuild.sh bin/demo ./test/demo "the demo program" "~15s"
	@bin/demo

demo-k8s: ## The same on Kubernetes (root): one-node cluster, nri-cni from deploy/base, two annotated pods ping over net1, teardown. Adds Kubernetes, no CRI-O.
	$(demo_require_root)
	$(call install_tools,demo-k8s)
	@GO=$(GO) bash test/tools/gobuild.sh bin/demo-k8s ./test/demo-k8s "the demo-k8s program" "~1 min"
	@bin/demo-k8s

soak: ## 500 pod cycles vs real containerd with nri-cni killed 20x and containerd restarted 2x; checks leaks (root).
	$(call install_tools,$(TOOLS_CONTAINERD))
	$(GO) run ./test/soak $(SOAK_ARGS)

bench: ## Overhead vs the raw CNI chain, as ratios (root): engine, NRI, real containerd, CRI-O, scale, hook, kubelet. Table + bin/bench.json.
	$(call install_tools,$(TOOLS_K8S) nft)
	$(GO) test -run xxx -bench . -benchtime 300x ./state/ ./kube/dra/
	$(GO) test -run xxx -bench 'Apply' -benchtime 200x ./nft/
	$(GO) test -run xxx -bench 'Storm100' -benchtime 5x ./kube/podresources/ ./attach/
	$(GO) test -run xxx -bench 'CreateContainerThroughNRI' -benchtime 3000x ./hook/nri/
	$(GO) run ./test/bench -out bin/bench.json $(BENCH_ARGS)

.PHONY: fuzz
fuzz: ## Every Go fuzz target (go test -list '^Fuzz'), one after another, FUZZTIME each (default 30s); `make test` runs their seeds.
	GO=$(GO) FUZZTIME=$(or $(FUZZTIME),30s) bash test/tools/fuzz.sh

clean: ## Remove build output.
	rm -rf bin

-include deploy.mk
