{{/* The chart's name. */}}
{{- define "nri-cni.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The full name of the release's objects: the release name when it
contains the chart name (helm install nri-cni ...), else release-chart. */}}
{{- define "nri-cni.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "nri-cni.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "nri-cni.serviceAccountName" -}}
{{- default (include "nri-cni.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "nri-cni.policyName" -}}
{{- printf "%s-network-status" (include "nri-cni.fullname" .) -}}
{{- end -}}

{{/* "true" when the DRA driver is on (it needs Kubernetes mode). */}}
{{- define "nri-cni.draOn" -}}
{{- and .Values.kubernetes.enabled (.Values.kubernetes.dra | default dict).enabled | toString -}}
{{- end -}}

{{/* The kubelet's root directory, for the DRA driver's mounts. */}}
{{/* "true" when MultiNetworkPolicy is enforced (Kubernetes mode and
kubernetes.multiNetworkPolicy.enabled). */}}
{{- define "nri-cni.mnpOn" -}}
{{- and .Values.kubernetes.enabled (.Values.kubernetes.multiNetworkPolicy | default dict).enabled | toString -}}
{{- end -}}

{{- define "nri-cni.kubeletDir" -}}
{{- (.Values.kubernetes.dra | default dict).kubeletDir | default "/var/lib/kubelet" | trimSuffix "/" -}}
{{- end -}}

{{- define "nri-cni.slicePolicyName" -}}
{{- printf "%s-dra-slices" (include "nri-cni.fullname" .) -}}
{{- end -}}

{{- define "nri-cni.claimPolicyName" -}}
{{- printf "%s-dra-claim-status" (include "nri-cni.fullname" .) -}}
{{- end -}}

{{- define "nri-cni.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nri-cni.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "nri-cni.labels" -}}
{{ include "nri-cni.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "nri-cni.image" -}}
{{- printf "%s:%s" .Values.image.repository (toString .Values.image.tag) -}}
{{- end -}}

{{/* The CNI network files: a YAML map file name -> config JSON. A value
is a JSON string or a YAML object; it must be a JSON object with a name. */}}
{{- define "nri-cni.networkFiles" -}}
{{- $files := dict -}}
{{- range $key, $cfg := .Values.networks -}}
{{- $json := "" -}}
{{- if kindIs "string" $cfg -}}
{{- $json = $cfg -}}
{{- else -}}
{{- $json = toPrettyJson $cfg -}}
{{- end -}}
{{- $parsed := fromJson $json -}}
{{- if or (hasKey $parsed "Error") (not (hasKey $parsed "name")) -}}
{{- fail (printf "networks.%s: not a CNI config (a JSON object with a name)" $key) -}}
{{- end -}}
{{- $ext := ternary ".conflist" ".conf" (hasKey $parsed "plugins") -}}
{{- $_ := set $files (printf "%s%s" $key $ext) $json -}}
{{- end -}}
{{- toYaml $files -}}
{{- end -}}

{{/* The node paths the DaemonSet mounts from .Values.hostPaths,
kubernetes.primaryConfDir and kubernetes.kubeconfig, each checked (absolute,
not /) and cleaned; a YAML map. Each is mounted at the same path in the
container, so nri.conf and the arguments name them as the node does:
nriSocketDir (the socket's directory), netns, cniBin, cniCache, state, run,
hookBin, primaryConfDir and cniConf (its directory, mounted), kubeconfig
(only when set, with Kubernetes mode). */}}
{{- define "nri-cni.paths" -}}
{{- $p := dict -}}
{{- $keys := list "nriSocket" "netns" "cniBin" "cniCache" "state" "run" "hookBin" -}}
{{- range $key, $_ := .Values.hostPaths -}}
{{- if not (has $key $keys) -}}
{{- fail (printf "hostPaths.%s: not a path the chart mounts (%s)" $key (join ", " $keys)) -}}
{{- end -}}
{{- end -}}
{{- range $key := $keys -}}
{{- $v := index ($.Values.hostPaths | default dict) $key -}}
{{- if not $v -}}
{{- fail (printf "hostPaths.%s: must be set (an absolute path on the node)" $key) -}}
{{- end -}}
{{- $_ := set $p $key (include "nri-cni.checkPath" (list (printf "hostPaths.%s" $key) $v)) -}}
{{- end -}}
{{- $_ := set $p "nriSocketDir" (include "nri-cni.checkPath" (list "hostPaths.nriSocket's directory" (dir $p.nriSocket))) -}}
{{- $primary := .Values.kubernetes.primaryConfDir | default "/etc/cni/net.d" -}}
{{- $_ = set $p "primaryConfDir" (include "nri-cni.checkPath" (list "kubernetes.primaryConfDir" $primary)) -}}
{{- $_ = set $p "cniConf" (include "nri-cni.checkPath" (list "kubernetes.primaryConfDir's directory" (dir $p.primaryConfDir))) -}}
{{- if and .Values.kubernetes.enabled .Values.kubernetes.kubeconfig -}}
{{- $_ = set $p "kubeconfig" (include "nri-cni.checkPath" (list "kubernetes.kubeconfig" .Values.kubernetes.kubeconfig)) -}}
{{- end -}}
{{- toYaml $p -}}
{{- end -}}

{{/* (list KEY PATH): PATH cleaned, or fail naming KEY unless it is an
absolute path other than /. */}}
{{- define "nri-cni.checkPath" -}}
{{- $key := index . 0 -}}
{{- $path := index . 1 | toString -}}
{{- if or (not (isAbs $path)) (eq (clean $path) "/") -}}
{{- fail (printf "%s: %q is not an absolute path other than / (the DaemonSet mounts it from the node)" $key $path) -}}
{{- end -}}
{{- clean $path -}}
{{- end -}}

{{/* nri.conf: .Values.config, the paths the DaemonSet mounts, and the
kubernetes: section when Kubernetes mode is on. */}}
{{- define "nri-cni.nriConf" -}}
{{- $paths := include "nri-cni.paths" . | fromYaml -}}
{{- $conf := deepCopy .Values.config -}}
{{- $_ := set $conf "confDir" "/etc/nri-cni/net.d" -}}
{{- /* Plugins run chrooted into the host's / (the DaemonSet mounts it at
/host), binDirs being host paths; config.pluginRoot "" runs them in the
image instead (binDirs then through the cniBin mount). */ -}}
{{- if not (hasKey $conf "pluginRoot") -}}
{{- $_ = set $conf "pluginRoot" "/host" -}}
{{- end -}}
{{- $_ = set $conf "binDirs" (list $paths.cniBin) -}}
{{- $_ = set $conf "stateDir" $paths.state -}}
{{- $_ = set $conf "cacheDir" $paths.cniCache -}}
{{- /* failClosed's paths match the DaemonSet's mounts (the host's / at
/host, the await hook's socket and binary at their host paths). */ -}}
{{- $fc := deepCopy ($conf.failClosed | default dict) -}}
{{- $_ = set $fc "nodeRoot" "/host" -}}
{{- $_ = set $fc "hookSocket" (printf "%s/await.sock" $paths.run) -}}
{{- $_ = set $fc "hookPath" (printf "%s/nri-cni" $paths.hookBin) -}}
{{- $_ = set $conf "failClosed" $fc -}}
{{- if .Values.kubernetes.enabled -}}
{{- $k := dict "sharedNamespaces" .Values.kubernetes.sharedNamespaces "npwgAnnotation" .Values.kubernetes.npwgAnnotation "defaultNetworkName" .Values.kubernetes.defaultNetworkName "maxNADConfigBytes" .Values.kubernetes.maxNADConfigBytes "maxNADCacheBytes" .Values.kubernetes.maxNADCacheBytes "nadPolicy" .Values.kubernetes.nadPolicy -}}
{{- /* Written only when set: empty means in-cluster, NODE_NAME and
/etc/cni/net.d, as deploy/base's nri.conf leaves them. */ -}}
{{- range $key := list "kubeconfig" "nodeName" "primaryConfDir" "podResourcesSocket" "deviceInfoDir" -}}
{{- with index $.Values.kubernetes $key -}}
{{- $_ = set $k $key (index $paths $key | default .) -}}
{{- end -}}
{{- end -}}
{{- if .Values.kubernetes.hotplug -}}
{{- $_ = set $k "hotplug" true -}}
{{- end -}}
{{- if eq (include "nri-cni.draOn" .) "true" -}}
{{- $dra := deepCopy .Values.kubernetes.dra -}}
{{- $_ = set $dra "kubeletDir" (include "nri-cni.kubeletDir" .) -}}
{{- $_ = set $k "dra" $dra -}}
{{- end -}}
{{- if eq (include "nri-cni.mnpOn" .) "true" -}}
{{- /* every key but the chart's own (admissionMode) */ -}}
{{- $_ = set $k "multiNetworkPolicy" (omit .Values.kubernetes.multiNetworkPolicy "admissionMode") -}}
{{- end -}}
{{- $_ = set $conf "kubernetes" $k -}}
{{- end -}}
{{- toYaml $conf -}}
{{- end -}}

{{/* One NAD policy rule with every key (as nri-cni normalizes it), JSON. */}}
{{- define "nri-cni.nadRule" -}}
{{- $r := . | default dict -}}
{{- toJson (dict "types" ($r.types | default list) "bridges" ($r.bridges | default list) "masters" ($r.masters | default list) "devices" ($r.devices | default list) "ipamRanges" ($r.ipamRanges | default list) "paths" ($r.paths | default list) "hostGateway" ($r.hostGateway | default false) "runtimeConfig" ($r.runtimeConfig | default false)) -}}
{{- end -}}

{{/* kubernetes.nadPolicy as nri-cni normalizes it (and as the generated
admission policy's nri-cni.io/nad-policy annotation records it), JSON. */}}
{{- define "nri-cni.nadPolicyJSON" -}}
{{- $p := .Values.kubernetes.nadPolicy | default dict -}}
{{- if not $p.default -}}
{{- fail "kubernetes.nadPolicy.default: the chart needs it (the rule of every namespace not listed)" -}}
{{- end -}}
{{- $ns := dict -}}
{{- range $name, $r := ($p.namespaces | default dict) -}}
{{- $_ := set $ns $name (include "nri-cni.nadRule" $r | fromJson) -}}
{{- end -}}
{{- toJson (dict "default" (include "nri-cni.nadRule" $p.default | fromJson) "namespaces" $ns) -}}
{{- end -}}

{{- define "nri-cni.requiredPolicyName" -}}
{{- printf "%s-required-plugins" (include "nri-cni.fullname" .) -}}
{{- end -}}

{{/* The apiVersion of the required-plugins MutatingAdmissionPolicy: v1 where
the cluster serves it (Kubernetes >= 1.36), else v1beta1 where served (1.34,
1.35 with the feature gate and runtime-config), else "" (not rendered). */}}
{{- define "nri-cni.requiredPolicyAPIVersion" -}}
{{- if .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy" -}}
admissionregistration.k8s.io/v1
{{- else if .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy" -}}
admissionregistration.k8s.io/v1beta1
{{- end -}}
{{- end -}}
