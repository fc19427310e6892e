package oci

import (
	"errors"
	"testing"

	"github.com/nri-cni/nri-cni/cni"
	"github.com/nri-cni/nri-cni/config"
)

// FuzzOCIIdentity: a container's annotations, any of fzOCIKeys present
// (bit i of present) with a fuzzed value each; only CRI-O's marker, the
// container type and the sandbox id have values chosen from a few.
func FuzzOCIIdentity(f *testing.F) {
	const all = 1<<11 - 1
	crio := uint16(1<<0 | 1<<1 | 1<<2 | 1<<3 | 1<<4 | 1<<5)
	cri := uint16(1<<6 | 1<<7 | 1<<8 | 1<<9 | 1<<10)
	for _, ct := range []string{"sandbox", "container", "", "Sandbox", "podsandbox"} {
		for _, present := range []uint16{crio, crio | cri&^(1<<6), crio &^ (1 << 4), crio &^ (1 << 2), cri, crio | cri, all &^ 1, 0, 1 << 7} {
			f.Add("c0ffee01", present, ct, "5ab0c5ab", "web", "tenant", "uid-web", "victim", "trusted", "victim-uid", "forged")
		}
	}
	f.Add("c0ffee01", crio|cri&^(1<<6), "sandbox", "5ab0c5ab", "", "", "", "victim", "trusted", "victim-uid", "forged")
	f.Add("", crio, "container", "", "../../etc", "ünïcode", "\x00", "a", "b", "c", "d")
	f.Fuzz(func(t *testing.T, id string, present uint16, ctype, sandboxID, podName, podNS, podUID, criName, criNS, criUID, criID string) {
		values := []string{"x", ctype, sandboxID, podName, podNS, podUID, "sandbox", criName, criNS, criUID, criID}
		ann := map[string]string{"io.kubernetes.cri-o.Namespace": criNS, "io.kubernetes.cri-o.KubeName": criName}
		for i, k := range fzOCIKeys {
			if present&(1<<i) != 0 {
				ann[k] = values[i]
			}
		}
		pod, rules, err := ociIdentity(id, ann, config.DefaultHookConfig())
		_, isCRIO := ann[annCRIOSandboxName]
		_, isContainerd := ann[annCRIContainerType]
		if err != nil {
			if !errors.Is(err, ErrIdentity) {
				t.Fatalf("error does not wrap ErrIdentity: %v", err)
			}
			if !isCRIO {
				t.Fatalf("refused without CRI-O's marker: %v", err)
			}
			return
		}
		or := func(v, def string) string {
			if v == "" {
				return def
			}
			return v
		}
		switch {
		case isCRIO && isContainerd:
			t.Fatalf("both runtimes' markers: accepted as %s %+v", rules, pod)
		case isCRIO:
			infra := id
			if ann[annCRIOContainerType] == "container" {
				infra = ann[annCRIOSandboxID]
			}
			want := cni.PodIdentity{Name: or(ann[annKubePodName], id), Namespace: or(ann[annKubePodNamespace], "default"),
				UID: ann[annKubePodUID], InfraID: infra}
			if rules != identityCRIO || pod != want {
				t.Fatalf("CRI-O: got %s %+v, want %+v from io.kubernetes.pod.* only", rules, pod, want)
			}
		case isContainerd:
			want := cni.PodIdentity{Name: or(ann[annCRISandboxName], id), Namespace: or(ann[annCRISandboxNamespace], "default"),
				UID: ann[annCRISandboxUID], InfraID: or(ann[annCRISandboxID], id)}
			if rules != identityContainerd || pod != want {
				t.Fatalf("containerd: got %s %+v, want %+v", rules, pod, want)
			}
		default:
			hc := config.DefaultHookConfig()
			first := func(keys []string, def string) string {
				for _, k := range keys {
					if ann[k] != "" {
						return ann[k]
					}
				}
				return def
			}
			want := cni.PodIdentity{Name: first(hc.PodNameAnnotations, id), Namespace: first(hc.PodNamespaceAnnotations, "default"),
				UID: first(hc.PodUIDAnnotations, ""), InfraID: first(hc.SandboxIDAnnotations, id)}
			if rules != identityGeneric || pod != want {
				t.Fatalf("neither runtime: got %s %+v, want %+v from the hook.* lists", rules, pod, want)
			}
		}
	})
}

// The annotation keys FuzzOCIIdentity sets, by bit of present.
var fzOCIKeys = []string{
	annCRIOSandboxName, annCRIOContainerType, annCRIOSandboxID, annKubePodName, annKubePodNamespace, annKubePodUID,
	annCRIContainerType, annCRISandboxName, annCRISandboxNamespace, annCRISandboxUID, annCRISandboxID,
}
