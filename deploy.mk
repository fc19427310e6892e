# Packaging and installation targets; included by the main Makefile
# (`-include deploy.mk`), which defines `build`, BIN and VERSION.
# Install locations (DESTDIR stages the whole tree, e.g. for packaging or tests):
DESTDIR         ?=
BIN             ?= bin/nri-cni
PLUGIN_DIR      ?= /opt/nri/plugins
PLUGIN_CONF_DIR ?= /etc/nri/conf.d
PLUGIN_IDX      ?= 10
CONF_DIR        ?= /etc/nri-cni
BINDIR          ?= /usr/local/bin
HOOKS_DIR       ?= /usr/share/containers/oci/hooks.d
# Which containers the hooks.d entry hooks: always (every container, the
# default: each gets nri.conf's networks) or annotation (only containers
# annotated nri-cni.io/networks; docs/install.md, "Which containers").
HOOK_MATCH      ?= always
SYSTEMD_DIR     ?= /etc/systemd/system
IMAGE           ?= localhost/nri-cni:dev
IMAGE_TAR       ?= bin/nri-cni-image.tar
IMAGE_VERSION   ?= $(or $(VERSION),dev)

PLUGIN_BIN  = $(DESTDIR)$(PLUGIN_DIR)/$(PLUGIN_IDX)-nri-cni
PLUGIN_CONF = $(DESTDIR)$(PLUGIN_CONF_DIR)/$(PLUGIN_IDX)-nri-cni.conf
HOOK_BIN    = $(DESTDIR)$(BINDIR)/nri-cni
HOOK_CONF   = $(DESTDIR)$(CONF_DIR)/nri.conf
NET_DIR     = $(DESTDIR)$(CONF_DIR)/net.d
HOOK_JSON   = $(DESTDIR)$(HOOKS_DIR)/nri-cni.json
SERVICE     = $(DESTDIR)$(SYSTEMD_DIR)/nri-cni.service

.PHONY: image install uninstall install-hook uninstall-hook install-service uninstall-service

# Installing into the real filesystem needs root; a DESTDIR does not.
define deploy_require_root
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" != 0 ]; then \
		echo "run as root (or set DESTDIR=/some/staging/dir)" >&2; exit 1; fi
endef

image: ## Container image as a docker-archive tar (bin/nri-cni-image.tar, localhost/nri-cni:dev) for kind/ctr.
	go run ./test/tools/image -out $(IMAGE_TAR) -tag $(IMAGE) -version $(IMAGE_VERSION) -bin $(BIN_K8S)

# install_net_dir: confDir (nri.conf's default, $(CONF_DIR)/net.d), empty
# until the admin puts a CNI config there; says what it is for.
define install_net_dir
	install -d -m 0755 $(NET_DIR)
	@if [ -z "$$(ls -A $(NET_DIR))" ]; then echo "note: $(CONF_DIR)/net.d is empty: put the CNI network configs nri-cni attaches there" \
		"(.conflist; with nri.conf's networks: [] the first one goes to every pod or container); until then nothing is attached and nothing fails"; fi
endef

install: build ## Install as containerd's pre-launched NRI plugin, and /etc/nri-cni/net.d for its networks (root; restart containerd after).
	$(deploy_require_root)
	install -D -m 0755 $(BIN) $(PLUGIN_BIN)
	@if [ -e "$(PLUGIN_CONF)" ]; then echo "kept existing $(PLUGIN_CONF)"; \
		else install -D -m 0644 nri.conf "$(PLUGIN_CONF)" && echo "installed $(PLUGIN_CONF)"; fi
	$(install_net_dir)
	@echo "note: restart containerd (systemctl restart containerd) so it launches $(PLUGIN_DIR)/$(PLUGIN_IDX)-nri-cni"

uninstall: ## Remove the pre-launched plugin and its config (keeps state and network dirs).
	$(deploy_require_root)
	rm -f $(PLUGIN_BIN) $(PLUGIN_CONF)
	@echo "note: left $(CONF_DIR), /var/lib/nri-cni and /var/lib/cni in place; restart containerd to stop the running plugin"

install-hook: build ## Install the OCI hook: binary, /etc/nri-cni/nri.conf (if absent), /etc/nri-cni/net.d, hooks.d entry (HOOK_MATCH=always|annotation) (root).
	$(deploy_require_root)
	@case "$(HOOK_MATCH)" in always|annotation) ;; *) echo "HOOK_MATCH=$(HOOK_MATCH): want always or annotation" >&2; exit 2;; esac
	install -D -m 0755 $(BIN) $(HOOK_BIN)
	@if [ -e "$(HOOK_CONF)" ]; then echo "kept existing $(HOOK_CONF)"; \
		elif [ "$(HOOK_MATCH)" = annotation ]; then \
			mkdir -p "$(dir $(HOOK_CONF))" && sed 's/^podSelection: false$$/podSelection: true/' nri.conf > "$(HOOK_CONF).tmp" && \
			chmod 0644 "$(HOOK_CONF).tmp" && mv -f "$(HOOK_CONF).tmp" "$(HOOK_CONF)" && \
			echo "installed $(HOOK_CONF) with podSelection: true (the annotation's value names the networks)"; \
		else install -D -m 0644 nri.conf "$(HOOK_CONF)" && echo "installed $(HOOK_CONF)"; fi
	$(install_net_dir)
	@if [ "$(HOOK_MATCH)" = annotation ]; then src=hooks.d/nri-cni-annotated.json; else src=hooks.d/nri-cni.json; fi; \
		echo "install -D -m 0644 $$src $(HOOK_JSON)"; install -D -m 0644 $$src $(HOOK_JSON)

uninstall-hook: ## Remove the OCI hook's binary and hooks.d entry (keeps config and state).
	$(deploy_require_root)
	rm -f $(HOOK_BIN) $(HOOK_JSON)
	@echo "note: left $(CONF_DIR), /var/lib/nri-cni and /var/lib/cni in place; run 'nri-cni gc' first if containers were killed"

install-service: build ## Install the external plugin as a systemd service: binary, /etc/nri-cni/nri.conf (if absent), /etc/nri-cni/net.d, unit (root).
	$(deploy_require_root)
	install -D -m 0755 $(BIN) $(HOOK_BIN)
	@if [ -e "$(HOOK_CONF)" ]; then echo "kept existing $(HOOK_CONF)"; \
		else install -D -m 0644 nri.conf "$(HOOK_CONF)" && echo "installed $(HOOK_CONF)"; fi
	$(install_net_dir)
	@# The unit names the binary and config by their installed paths.
	mkdir -p $(dir $(SERVICE))
	sed -e 's|/usr/local/bin/nri-cni|$(BINDIR)/nri-cni|g' -e 's|/etc/nri-cni/nri.conf|$(CONF_DIR)/nri.conf|g' \
		deploy/systemd/nri-cni.service > $(SERVICE).tmp
	chmod 0644 $(SERVICE).tmp && mv -f $(SERVICE).tmp $(SERVICE)
	@if [ -z "$(DESTDIR)" ]; then echo "note: run 'systemctl daemon-reload && systemctl enable --now nri-cni' to start it"; \
		else echo "staged $(SERVICE)"; fi

uninstall-service: ## Stop and remove the systemd service (keeps config and state; keeps the binary if the OCI hook uses it).
	$(deploy_require_root)
	@if [ -z "$(DESTDIR)" ] && [ -e "$(SERVICE)" ] && command -v systemctl >/dev/null; then \
		systemctl disable --now nri-cni.service || true; fi
	rm -f $(SERVICE)
	@if [ -e "$(HOOK_JSON)" ]; then echo "kept $(HOOK_BIN): the OCI hook ($(HOOK_JSON)) uses it"; \
		else rm -f $(HOOK_BIN); fi
	@if [ -z "$(DESTDIR)" ] && command -v systemctl >/dev/null; then systemctl daemon-reload || true; fi
	@echo "note: left $(CONF_DIR), /var/lib/nri-cni and /var/lib/cni in place"
