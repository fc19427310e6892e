package nri

// What subscribing to CreateContainer costs every container creation on the
// node: the handler alone, and the whole NRI round trip (runtime side
// embedded, real socket) with and without nri-cni subscribed.
//
//	go test -run '^$' -bench CreateContainer -benchmem ./hook/

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	validator "github.com/containerd/nri/plugins/default-validator/builtin"
	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/attach/attachtest"
	"github.com/nri-cni/nri-cni/config"
	"github.com/nri-cni/nri-cni/plan"
)

// benchPods: a pod attached by Run, one that does not ask for networks
// (requireAnnotation, the Kubernetes default), a host-network one.
func benchPods(b *testing.B) (*Plugin, map[string]*api.PodSandbox) {
	f := attachtest.New(b, []string{"alpha"}, nil)
	f.Reconfigure(func(c *config.Config) { c.PodSelection, c.RequireAnnotation = true, true })
	quiet := logrus.New()
	quiet.SetLevel(logrus.ErrorLevel)
	p := New(testEngine(f.Mgr), nil, logrus.NewEntry(quiet))
	attached := runningPod(f, "attached", 10)
	attached.Annotations = map[string]string{plan.AnnotationNetworks: "alpha"}
	require.NoError(b, p.RunPodSandbox(context.Background(), attached))
	return p, map[string]*api.PodSandbox{
		"attached":      attached,
		"not-requested": runningPod(f, "plain", 11),
		"host-network":  nriPod("host", "", 12),
	}
}

func BenchmarkCreateContainerHandler(b *testing.B) {
	p, pods := benchPods(b)
	ctr := nriCtr("app", "x")
	for _, name := range []string{"attached", "not-requested", "host-network"} {
		pod := pods[name]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := p.CreateContainer(context.Background(), pod, ctr); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// podOnly is nri-cni as it was before CreateContainer: not subscribed.
type podOnly struct{ p *Plugin }

func (o podOnly) Configure(ctx context.Context, cfg, rt, v string) (api.EventMask, error) {
	_, err := o.p.Configure(ctx, cfg, rt, v)
	return 0, err // the events podOnly implements
}

func (o podOnly) RunPodSandbox(ctx context.Context, pod *api.PodSandbox) error {
	return o.p.RunPodSandbox(ctx, pod)
}

func BenchmarkCreateContainerThroughNRI(b *testing.B) {
	p, pods := benchPods(b)
	for _, tc := range []struct {
		name     string
		plugin   any
		validate bool
	}{
		{"not-subscribed", podOnly{p}, false},
		{"subscribed", p, false},
		{"subscribed+validator-requires-nri-cni", p, true},
		{"subscribed+validator-requires-nri-cni+nri-cni-validates", validating{p}, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			r := startNRIRuntime(b, tc.plugin, tc.validate)
			req := &api.CreateContainerRequest{Pod: pods["attached"], Container: nriCtr("app", "attached")}
			b.ReportAllocs()
			for b.Loop() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_, err := r.CreateContainer(ctx, req)
				cancel()
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// validating is nri-cni as it subscribes on a runtime with validation
// (validate.go): also as a validator of every container.
type validating struct{ *Plugin }

func (v validating) Configure(ctx context.Context, cfg, rt, ver string) (api.EventMask, error) {
	if _, err := v.Plugin.Configure(ctx, cfg, rt, ver); err != nil {
		return 0, err
	}
	return subscription("v0.12.3", "containerd", "2.4.2"), nil
}

// startNRIRuntime starts the runtime side of NRI (what containerd embeds)
// on a private socket and connects plugin to it as "10-nri-cni".
func startNRIRuntime(b *testing.B, plugin any, requireNRICNI bool) *adaptation.Adaptation {
	dir := b.TempDir()
	sock := filepath.Join(dir, "nri.sock")
	synced := make(chan struct{}, 4)
	syncFn := func(ctx context.Context, cb adaptation.SyncCB) error {
		_, err := cb(ctx, nil, nil)
		synced <- struct{}{}
		return err
	}
	updateFn := func(context.Context, []*adaptation.ContainerUpdate) ([]*adaptation.ContainerUpdate, error) {
		return nil, nil
	}
	opts := []adaptation.Option{adaptation.WithSocketPath(sock), adaptation.WithPluginPath(dir), adaptation.WithPluginConfigPath(dir)}
	if requireNRICNI {
		opts = append(opts, adaptation.WithDefaultValidator(&validator.DefaultValidatorConfig{Enable: true, RequiredPlugins: []string{"nri-cni"}}))
	}
	r, err := adaptation.New("bench", "v0", syncFn, updateFn, opts...)
	require.NoError(b, err)
	require.NoError(b, r.Start())
	b.Cleanup(r.Stop)
	<-synced // Start's own sync (no pre-launched plugins)

	st, err := stub.New(plugin, stub.WithSocketPath(sock), stub.WithPluginName("nri-cni"), stub.WithPluginIdx("10"))
	require.NoError(b, err)
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(func() { cancel(); st.Stop() })
	require.NoError(b, st.Start(ctx))
	select {
	case <-synced:
	case <-time.After(15 * time.Second):
		b.Fatal("nri-cni did not register")
	}
	r.BlockPluginSync().Unblock() // registration done
	return r
}
