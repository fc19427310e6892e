// Package oci is the OCI hook runtime adapter: the runtime (runc,
// podman, CRI-O hooks.d, containerd via NRI's hook-injector) runs
// `nri-cni hook STAGE` with the container's state (runtime-spec
// specs.State) on stdin. createRuntime/prestart attach, poststop detaches;
// both go through the same attachment engine as the NRI plugin.
package oci

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/sirupsen/logrus"

	"github.com/nri-cni/nri-cni/attach"
	"github.com/nri-cni/nri-cni/config"
)

// Stages nri-cni acts on.
const (
	StageCreateRuntime = "createRuntime"
	StagePrestart      = "prestart" // deprecated twin of createRuntime
	StagePoststop      = "poststop"
)

// ErrUnknownStage: the stage is not an OCI hook stage.
var ErrUnknownStage = errors.New("unknown OCI hook stage")

// ErrKubernetesSection: the hook's nri.conf has a kubernetes section, which
// hook mode cannot serve in either build: a hook runs for one container,
// with no API client, so it would read no NetworkAttachmentDefinition
// (the NPWG annotation would be ignored, as would NAD default networks) and
// write no network-status. The attach fails rather than run without what
// the section asks for; a detach (poststop) still runs, so nothing attached
// before the section was added leaks.
var ErrKubernetesSection = errors.New("nri.conf has a kubernetes section, which hook mode cannot serve " +
	"(no API client: no NetworkAttachmentDefinitions, no network-status); remove it from the hook's nri.conf " +
	"(Kubernetes mode is nri-cni-k8s run, the DaemonSet)")

// OCIHook handles one hook invocation. I/O is injected so tests need no
// process-global state.
type OCIHook struct {
	Mgr   *attach.Manager
	Hook  config.HookConfig
	Stdin io.Reader
	Log   *logrus.Entry
}

// StageAuto derives the stage from the state's status: a hooks.d entry
// passes the same arguments to every stage it lists.
const StageAuto = "auto"

// Run reads the state from Stdin and handles stage ("" or "auto": derived
// from the state's status).
func (h *OCIHook) Run(ctx context.Context, stage string) error {
	switch stage {
	case StageCreateRuntime, StagePrestart, StagePoststop, StageAuto, "":
	case "createContainer", "startContainer", "poststart":
		return nil // nothing to do at these stages
	default:
		return fmt.Errorf("%w %q (want createRuntime, prestart, poststop or auto)", ErrUnknownStage, stage)
	}
	var st specs.State
	if err := json.NewDecoder(h.Stdin).Decode(&st); err != nil {
		return fmt.Errorf("reading the OCI state from stdin: %w", err)
	}
	if st.ID == "" {
		return errors.New("OCI state on stdin has no container id")
	}
	if stage == StageAuto || stage == "" {
		switch st.Status {
		case specs.StateCreating, specs.StateCreated:
			stage = StageCreateRuntime
		case specs.StateStopped:
			stage = StagePoststop
		case specs.StateRunning:
			return nil // poststart, startContainer: nothing to do
		default:
			return fmt.Errorf("container %s: cannot tell the hook stage from status %q: name it (createRuntime or poststop)", st.ID, st.Status)
		}
	}
	spec, specErr := readSpec(st.Bundle)
	sb, rules, idErr := h.sandbox(&st, spec)
	log := h.Log.WithFields(logrus.Fields{"container": st.ID, "stage": stage, "pod": sb.Pod.Name, "namespace": sb.Pod.Namespace,
		"identity": rules})
	if stage == StagePoststop {
		if idErr != nil { // the record is keyed by the container id alone
			log.WithError(idErr).Warn("detaching without a pod identity")
		}
		return timed(log, "detach", func() error { return h.Mgr.Detach(ctx, sb, true) })
	}

	if h.Mgr.Config().Kubernetes != nil {
		return fmt.Errorf("container %s: %w", st.ID, ErrKubernetesSection)
	}
	if specErr != nil {
		log.WithError(specErr).Warn("bundle config unreadable: using the pid's network namespace")
	} else if !hasNetns(spec) {
		log.Info("container shares the host network namespace: skipped")
		return nil
	}
	if idErr != nil {
		if h.Mgr.Config().FailurePolicy == config.FailurePolicyIgnore {
			log.WithError(idErr).Error("failurePolicy ignore: the container starts without nri-cni's networks")
			return nil
		}
		return fmt.Errorf("container %s: %w", st.ID, idErr)
	}
	if st.Pid <= 0 {
		return fmt.Errorf("container %s: OCI state has no pid at %s", st.ID, stage)
	}
	err := timed(log, "attach", func() error {
		_, err := h.Mgr.Attach(ctx, sb)
		return confDirHint(err, h.Mgr.Config().ConfDir)
	})
	if err != nil && h.Mgr.Config().FailurePolicy == config.FailurePolicyIgnore {
		log.Error("failurePolicy ignore: the container starts without nri-cni's networks")
		return nil
	}
	return err
}

// sandbox translates the state (and the bundle's spec, when readable); the
// pod identity follows ociIdentity's rules, which it also names. On an error
// the Sandbox still carries the container id.
func (h *OCIHook) sandbox(st *specs.State, spec *specs.Spec) (attach.Sandbox, string, error) {
	ann := map[string]string{}
	if spec != nil {
		for k, v := range spec.Annotations {
			ann[k] = v
		}
	}
	for k, v := range st.Annotations { // the state's own annotations win
		ann[k] = v
	}
	pod, rules, err := ociIdentity(st.ID, ann, h.Hook)
	sb := attach.Sandbox{
		ID:          st.ID,
		Kind:        "container",
		Annotations: ann,
		Pid:         uint32(max(st.Pid, 0)),
		Pod:         pod,
	}
	if spec != nil && spec.Linux != nil {
		for _, ns := range spec.Linux.Namespaces {
			if ns.Type == specs.NetworkNamespace {
				sb.Pinned = ns.Path // "" = a new netns: the pid route alone
			}
		}
	}
	return sb, rules, err
}

// confDirHint adds to a failed attach's error that confDir does not exist
// (so no network is loaded; `make install-hook` creates it): the container
// asked for a network by name (a container that asks for none is skipped
// without a config, plan.SkipNoConfig), and its error names that network.
func confDirHint(err error, confDir string) error {
	if err == nil {
		return nil
	}
	if _, statErr := os.Stat(confDir); !errors.Is(statErr, fs.ErrNotExist) {
		return err
	}
	return fmt.Errorf("%w (confDir %s does not exist, so no network is loaded: create it and put the CNI configs there)", err, confDir)
}

// readSpec reads the bundle's config.json.
func readSpec(bundle string) (*specs.Spec, error) {
	if bundle == "" {
		return nil, errors.New("no bundle in the OCI state")
	}
	data, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		return nil, err
	}
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(bundle, "config.json"), err)
	}
	return &spec, nil
}

// hasNetns reports whether the spec gives the container a network namespace
// of its own (new, or joined by path); without one it shares the host's.
func hasNetns(spec *specs.Spec) bool {
	if spec.Linux == nil {
		return false
	}
	for _, ns := range spec.Linux.Namespaces {
		if ns.Type == specs.NetworkNamespace {
			return true
		}
	}
	return false
}

// timed runs op and logs its outcome with its duration: errors at error
// level (and returned), success at debug.
func timed(log *logrus.Entry, what string, op func() error) error {
	start := time.Now()
	err := op()
	log = log.WithField("duration", time.Since(start).Round(time.Microsecond))
	if err != nil {
		log.WithError(err).Error(what + " failed")
		return err
	}
	log.Debug(what + " done")
	return nil
}
