# cloud-provider-baremetal: build, test and benchmark entry points. `make` lists them.

GO       ?= go
TOOLSBIN := hack/tools/bin
BIN      := bin
PKGS     := ./...
# Untagged: v0.0.0-g<short commit>. The g keeps it SemVer (the chart's version) when the
# short commit is all digits with a leading zero, which SemVer forbids.
VERSION  ?= $(shell git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null || echo v0.0.0-$$(c=$$(git rev-parse --short HEAD 2>/dev/null) && echo g$$c || echo dev))
COMMIT   := $(shell git rev-parse HEAD 2>/dev/null)
# The build date is the commit's, never the clock's, so that two builds of one commit are
# the same to the byte (binaries and images); SOURCE_DATE_EPOCH overrides it, as in other
# reproducible builds.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
BUILD_DATE := $(shell date -u -d @$(SOURCE_DATE_EPOCH) +%Y-%m-%dT%H:%M:%SZ 2>/dev/null || date -u -r $(SOURCE_DATE_EPOCH) +%Y-%m-%dT%H:%M:%SZ)
LDFLAGS  := -X k8s.io/component-base/version.gitVersion=$(VERSION) \
            -X k8s.io/component-base/version.gitCommit=$(COMMIT) \
            -X k8s.io/component-base/version.buildDate=$(BUILD_DATE)
# Images: named $(REGISTRY)/baremetal-ccm:$(VERSION) and $(REGISTRY)/baremetal-agent:$(VERSION).
REGISTRY ?= ghcr.io/cloud-provider-baremetal
PLATFORMS := linux/amd64 linux/arm64

comma := ,
space := $(subst ,, )

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-10s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build bin/baremetal-ccm and bin/baremetal-agent (version stamped from git)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/baremetal-ccm ./ccm
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/baremetal-agent ./agent

.PHONY: images
images: ## OCI image archives bin/baremetal-ccm.oci.tar and bin/baremetal-agent.oci.tar, linux/amd64 and linux/arm64, reproducible (docs/install.md, Images)
	@for platform in $(PLATFORMS); do for prog in ccm agent; do \
		echo "images: building $(BIN)/$${platform%/*}_$${platform#*/}/baremetal-$$prog"; \
		CGO_ENABLED=0 GOOS=$${platform%/*} GOARCH=$${platform#*/} $(GO) build -trimpath -ldflags "$(LDFLAGS)" \
			-o $(BIN)/$${platform%/*}_$${platform#*/}/baremetal-$$prog ./$$prog || exit 1; \
	done; done
	$(GO) -C hack/image run . build -bin $(abspath $(BIN)) -platforms $(subst $(space),$(comma),$(PLATFORMS)) \
		-registry $(REGISTRY) -version $(VERSION) -revision $(COMMIT) -source-date-epoch $(SOURCE_DATE_EPOCH)

.PHONY: push
push: images ## Push both images to REGISTRY as <name>:VERSION, with the credentials of docker or podman login (docs/install.md, Images)
	$(GO) -C hack/image run . push -bin $(abspath $(BIN)) -registry $(REGISTRY) -version $(VERSION)

# A release: make release VERSION=vX.Y.Z writes RELEASE_DIR/VERSION, docs/install.md (Install).
RELEASE_DIR := $(BIN)/release

.PHONY: release
release: ## VERSION=vX.Y.Z[-pre]: bin/release/VERSION/ with both image archives, install.yaml (images by digest), the packaged chart and SHA256SUMS
	@case "$(origin VERSION)" in command\ line|environment*) ;; *) \
		echo "make release needs the release's version: make release VERSION=vMAJOR.MINOR.PATCH[-PRERELEASE], such as v0.2.0" >&2; exit 1;; esac
	@$(GO) build -o $(BIN)/baremetal-release ./hack/release
	@$(BIN)/baremetal-release -check -version '$(VERSION)'
	@$(MAKE) --no-print-directory helm
	@# The images of the release, built apart: bin/ keeps those of make images.
	@$(MAKE) --no-print-directory images BIN=$(RELEASE_DIR)/build VERSION=$(VERSION)
	$(BIN)/baremetal-release -version '$(VERSION)' -images $(RELEASE_DIR)/build -out $(RELEASE_DIR)/$(VERSION)

.PHONY: version
version: ## Print the version that builds and images are stamped with
	@echo $(VERSION)

.PHONY: demo
demo: ## Root, Linux: the whole product on one machine, with a failover (README, Try it, gives the cold and warm times)
	@if [ "$$(id -u)" != 0 ]; then echo "make demo needs root: it creates network namespaces. Run: sudo make demo" >&2; exit 1; fi
	@./hack/install-deps.sh demo
	@./hack/build-tools.sh $(DEMO_TOOLS)
	@$(MAKE) --no-print-directory build
	@$(GO) build -o $(BIN)/baremetal-demo ./test/demo
	@BAREMETAL_CCM=$(CURDIR)/$(BIN)/baremetal-ccm BAREMETAL_AGENT=$(CURDIR)/$(BIN)/baremetal-agent $(BIN)/baremetal-demo

# The control plane programs the demo runs; make tools builds these and the install
# test's kube-scheduler, kubelet and kubectl.
DEMO_TOOLS := etcd kube-apiserver kube-controller-manager kube-proxy

.PHONY: deps
deps: ## Check the system packages make test runs (hack/install-deps.sh); as root, install the missing ones from Debian
	@./hack/install-deps.sh test

.PHONY: tools
tools: ## Build kube-apiserver, etcd, kube-controller-manager, kube-proxy, kube-scheduler, kubelet and kubectl for the integration tests, and e2e.test, ginkgo and agnhost for the conformance test, into hack/tools/bin
	./hack/build-tools.sh

.PHONY: helm
helm: ## Build helm for the chart's tests (lint, template) into hack/tools/bin (first time ~5 min)
	./hack/build-helm.sh

.PHONY: containerd
containerd: ## Build containerd, its runc shim and ctr for the install test's kubelets into hack/tools/bin (first time ~1 min)
	./hack/build-containerd.sh

.PHONY: test
test: deps tools helm containerd build test-images upgrade-images node-images conformance-images fmt-check vet lint ## Every test (with -race; the end-to-end ones as root), go vet, golangci-lint and a gofmt check; ends with a line of counts
	@$(GO) build -o $(BIN)/testreport ./hack/testreport
	BAREMETAL_CCM=$(CURDIR)/$(BIN)/baremetal-ccm BAREMETAL_AGENT=$(CURDIR)/$(BIN)/baremetal-agent \
	BAREMETAL_IMAGES=$(abspath $(BIN)) BAREMETAL_UPGRADE_IMAGES=$(abspath $(UPGRADE_BIN)) \
	BAREMETAL_IMAGE_VERSION=$(VERSION) BAREMETAL_NODE_IMAGES=$(abspath $(NODE_BIN)) GO=$(GO) \
	BAREMETAL_CONFORMANCE_IMAGES=$(abspath $(CONFORMANCE_BIN)) \
		$(BIN)/testreport -race -count=1 -timeout 70m $(PKGS)

.PHONY: conformance
conformance: deps tools containerd build images node-images conformance-images ## Root: Kubernetes' own [Feature:LoadBalancer] specs against the release's install.yaml on real kubelets, from a client behind a router (docs/conformance.md)
	BAREMETAL_IMAGES=$(abspath $(BIN)) BAREMETAL_IMAGE_VERSION=$(VERSION) BAREMETAL_NODE_IMAGES=$(abspath $(NODE_BIN)) \
	BAREMETAL_CONFORMANCE_IMAGES=$(abspath $(CONFORMANCE_BIN)) \
		$(GO) test -count=1 -v -timeout 80m ./test/conformance

# The install test's kubelets run every pod's sandbox from this image.
NODE_BIN := $(BIN)/node

.PHONY: node-images
node-images: ## The pause image of the install test's kubelets (hack/pause), for this machine's architecture, into bin/node
	@arch=$$($(GO) env GOARCH); \
	CGO_ENABLED=0 GOOS=linux GOARCH=$$arch $(GO) build -trimpath -o $(NODE_BIN)/linux_$$arch/baremetal-pause ./hack/pause && \
	$(GO) -C hack/image run . build -programs baremetal-pause -bin $(abspath $(NODE_BIN)) -platforms linux/$$arch \
		-registry localhost/baremetal-test -version test -revision $(COMMIT) -source-date-epoch $(SOURCE_DATE_EPOCH)

# Kubernetes' [Feature:LoadBalancer] specs run their pods from agnhost, under the name
# they give it; the nodes import this archive instead of pulling it.
CONFORMANCE_BIN := $(BIN)/conformance
CONFORMANCE_REGISTRY := registry.k8s.io/e2e-test-images

.PHONY: conformance-images
conformance-images: ## Kubernetes' e2e image agnhost (hack/tools' agnhost with Debian's sh, curl, wget and nc: hack/agnhost-rootfs.sh), named as the specs name it, and CoreDNS's (hack/coredns), the cluster DNS, for this machine's architecture, into bin/conformance
	@./hack/build-tools.sh agnhost
	@./hack/build-coredns.sh
	@arch=$$($(GO) env GOARCH); \
	k8s=$$($(GO) -C hack/tools list -m -f '{{.Dir}}' k8s.io/kubernetes) && version=$$(cat "$$k8s/test/images/agnhost/VERSION") && \
	./hack/agnhost-rootfs.sh $(CONFORMANCE_BIN)/rootfs/linux_$$arch && \
	mkdir -p $(CONFORMANCE_BIN)/linux_$$arch && cp $(TOOLSBIN)/agnhost $(CONFORMANCE_BIN)/linux_$$arch/agnhost && \
	$(GO) -C hack/image run . build -programs agnhost -bin $(abspath $(CONFORMANCE_BIN)) -rootfs $(abspath $(CONFORMANCE_BIN)/rootfs) \
		-platforms linux/$$arch -registry $(CONFORMANCE_REGISTRY) -version $$version -revision $(COMMIT) -source-date-epoch $(SOURCE_DATE_EPOCH) && \
	cp $(TOOLSBIN)/coredns $(CONFORMANCE_BIN)/linux_$$arch/coredns && \
	$(GO) -C hack/image run . build -programs coredns -bin $(abspath $(CONFORMANCE_BIN)) \
		-platforms linux/$$arch -registry localhost/baremetal-test -version test -revision $(COMMIT) -source-date-epoch $(SOURCE_DATE_EPOCH)

# The end-to-end TestUpgrade moves from the images of bin/ to these: the same programs
# stamped with another version, so other images.
UPGRADE_BIN := $(BIN)/upgrade

.PHONY: upgrade-images
upgrade-images: ## The images again, stamped VERSION-upgrade, for this machine's architecture only, into bin/upgrade: what the end-to-end TestUpgrade moves to
	@$(MAKE) --no-print-directory images BIN=$(UPGRADE_BIN) VERSION=$(VERSION)-upgrade PLATFORMS=linux/$$($(GO) env GOARCH)

.PHONY: test-images
test-images: images ## The image builder's tests, on what make images made too (it builds them twice: same digests?)
	BAREMETAL_IMAGES=$(abspath $(BIN)) BAREMETAL_IMAGE_VERSION=$(VERSION) BAREMETAL_IMAGE_REGISTRY=$(REGISTRY) \
		$(GO) -C hack/image test -race -count=1 ./...

.PHONY: vet
vet: ## go vet
	$(GO) vet $(PKGS)
	$(GO) -C hack/image vet ./...

.PHONY: lint
lint: ## golangci-lint with the linters of .golangci.yml (govet, staticcheck, errcheck, ineffassign, unused, misspell, revive's exported rule); builds it into hack/tools/bin first (~2 min cold)
	./hack/build-golangci-lint.sh
	$(TOOLSBIN)/golangci-lint run --timeout=10m ./...
	cd hack/image && ../../$(TOOLSBIN)/golangci-lint run --timeout=10m ./...

.PHONY: fmt-check
fmt-check: ## Fail if gofmt would change a file
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './hack/tools/*')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

.PHONY: bench
bench: bench-pick bench-annotation bench-ipam bench-prober bench-ccm bench-agent bench-idle bench-wire bench-failover bench-busy ## Every benchmark; figures are in docs/performance.md

.PHONY: bench-pick
bench-pick: ## The announcer rule: spread over equal nodes (max/mean, min/mean), moves when a node leaves or joins against the fewest possible, and deciding 5,000 groups over 1,000 nodes after a node leaves
	$(GO) test -run='^$$' -bench=. -benchmem ./pick

.PHONY: bench-annotation
bench-annotation: ## Annotation parser: a Service at the list limit, and with 5,000 and 50,000 names, which are refused
	$(GO) test -run='^$$' -bench=. -benchmem ./annotation

.PHONY: bench-ipam
bench-ipam: ## Allocator: time, allocations and retained heap per address at 100,000 allocated; restore of 5,000 and 50,000 Services (the allocator's, and the ccm's with its events)
	$(GO) test -run='^$$' -bench=. -benchmem ./ipam
	$(GO) test -run='^$$' -bench='^BenchmarkRestoreOutsidePools$$' -benchmem ./ccm/provider

.PHONY: bench-prober
bench-prober: ## Root for a network namespace of its own, ~1 min: the ccm's prober of 5,000 simulated agents at 10 probes/s each (CPU, false downs with a core kept busy, detection of a stopped agent, an isolation)
	$(GO) test -run='^$$' -bench='^BenchmarkProber$$' -benchtime=1x -timeout=10m ./ccm/prober

.PHONY: bench-ccm
bench-ccm: tools build ## Real control plane: 5,000 Services to converge (time, ccm peak RSS); API writes in steady state and per announcer change; a node announcing 500 Services dies
	BAREMETAL_CCM=$(CURDIR)/$(BIN)/baremetal-ccm $(GO) test -run='^$$' -bench='BenchmarkConverge|BenchmarkSteadyState|BenchmarkNodeFailover' -benchtime=1x -timeout=30m ./test/ccm

.PHONY: bench-agent
bench-agent: tools build ## Real control plane, ~2 min: the agent's peak RSS with 5,000 and 50,000 Services in the cluster (9,000 of them LoadBalancer) (BENCH_AGENT_BASELINE=<binary> measures another build too); what a standby computes to take over 5,000 Services
	$(GO) test -run='^$$' -bench=BenchmarkTakeover -benchmem ./desired
	BAREMETAL_AGENT=$(CURDIR)/$(BIN)/baremetal-agent $(GO) test -run='^$$' -bench=BenchmarkAgentMemory -benchtime=1x -timeout=150m ./test/agent

.PHONY: bench-failover
bench-failover: deps tools build ## Root, ~27 min, through kube-proxy and pods: 20 failures in each case (node death v4/v6, with the ccm leader, with the API server stopped; 5 of a node announcing 5,000 Services); one table of min/p50/p99/max
	BAREMETAL_CCM=$(CURDIR)/$(BIN)/baremetal-ccm BAREMETAL_AGENT=$(CURDIR)/$(BIN)/baremetal-agent $(GO) test -run='^$$' -bench=BenchmarkFailover -benchtime=1x -timeout=90m ./test/e2e

# How many runs make bench-bulk makes of the 5,000-Service case.
BULK_RUNS ?= 10

.PHONY: bench-bulk
bench-bulk: deps tools build ## Root, ~10 min a run: bench-failover's 5,000-Service case alone, BULK_RUNS (10) times in a row, each on a cluster of its own; each run's table gives its live agents taken for down
	BAREMETAL_CCM=$(CURDIR)/$(BIN)/baremetal-ccm BAREMETAL_AGENT=$(CURDIR)/$(BIN)/baremetal-agent $(GO) test -run='^$$' -bench='^BenchmarkFailover$$/^5000-services$$' -benchtime=1x -count=$(BULK_RUNS) -timeout=$$(( $(BULK_RUNS) * 20 ))m ./test/e2e

.PHONY: bench-wire
bench-wire: deps tools build ## Root, ~3 min: the wire check's steady-state cost, one node backing 5,000 addresses of another at the default interval: requests and replies a second, both agents' CPU
	BAREMETAL_CCM=$(CURDIR)/$(BIN)/baremetal-ccm BAREMETAL_AGENT=$(CURDIR)/$(BIN)/baremetal-agent $(GO) test -run='^$$' -bench='^BenchmarkWireCheck$$' -benchtime=1x -timeout=15m ./test/e2e

.PHONY: bench-idle
bench-idle: deps tools build ## Root, ~1 min: the agents' CPU at rest (3 nodes, the ccm probing them, one Service), in millicores against their 20m request
	BAREMETAL_CCM=$(CURDIR)/$(BIN)/baremetal-ccm BAREMETAL_AGENT=$(CURDIR)/$(BIN)/baremetal-agent $(GO) test -run='^$$' -bench='^BenchmarkAgentIdle$$' -benchtime=1x -timeout=10m ./test/e2e

# How long make bench-busy may run: enough for its default 10 minutes of pressure a case.
BUSY_TIMEOUT ?= 90m

.PHONY: bench-busy
bench-busy: deps tools build ## Root, ~25 min, cgroups: the announcer's agent at its CPU request (20m; then with a 100m limit too) beside busy loops on every core, 10 min of pressure (BAREMETAL_BUSY_MINUTES=N for N) then 20 node deaths under it; false failovers, live agents down, failed requests, detection and outage p50/p99
	BAREMETAL_CCM=$(CURDIR)/$(BIN)/baremetal-ccm BAREMETAL_AGENT=$(CURDIR)/$(BIN)/baremetal-agent $(GO) test -run='^$$' -bench=BenchmarkBusyNode -benchtime=1x -timeout=$(BUSY_TIMEOUT) ./test/e2e

.PHONY: fuzz
fuzz: ## Fuzz the cloud-config, annotation, probe, ARP and NDP parsers, a minute each (make test runs their seeds)
	$(GO) test -run='^$$' -fuzz='^FuzzParse$$' -fuzztime=60s ./config
	$(GO) test -run='^$$' -fuzz='^FuzzParse$$' -fuzztime=60s ./annotation
	$(GO) test -run='^$$' -fuzz='^FuzzParse$$' -fuzztime=60s ./probe
	$(GO) test -run='^$$' -fuzz='^FuzzARPReply$$' -fuzztime=60s ./agent/l2
	$(GO) test -run='^$$' -fuzz='^FuzzNDPReply$$' -fuzztime=60s ./agent/l2

.PHONY: clean
clean: ## Remove built tools and test caches
	rm -rf $(TOOLSBIN) $(BIN)
	$(GO) clean -testcache
