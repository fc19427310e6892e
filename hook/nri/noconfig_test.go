package nri

import (
	"context"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nri-cni/nri-cni/attach/attachtest"
	"github.com/nri-cni/nri-cni/config"
)

// TestEmptyConfDirFailsNoPod: nri.conf's networks: [] with no config in
// confDir (the drop-in installed, no network added yet). A pod that asks
// for no network by name starts — RunPodSandbox and CreateContainer, in line
// and in the background — with nothing attached; one whose annotation names
// a network (podSelection) still fails, naming it.
func TestEmptyConfDirFailsNoPod(t *testing.T) {
	for _, background := range []bool{false, true} {
		t.Run(map[bool]string{false: "inline", true: "background"}[background], func(t *testing.T) {
			f := attachtest.New(t, nil, nil)
			f.Reconfigure(func(c *config.Config) { c.Networks, c.BackgroundAttach = nil, background })
			t.Cleanup(f.Mgr.Background().WaitIdle)
			p := New(testEngine(f.Mgr), nil, logrus.NewEntry(logrus.New()))
			pod := runningPod(f, "sb1", 10)
			require.NoError(t, p.RunPodSandbox(context.Background(), pod))
			f.Mgr.Background().WaitIdle()
			require.NoError(t, createContainer(t, p, pod))
			assert.Empty(t, f.Calls())

			f.Reconfigure(func(c *config.Config) { c.PodSelection = true })
			t.Cleanup(f.Mgr.Background().WaitIdle)
			p = New(testEngine(f.Mgr), nil, logrus.NewEntry(logrus.New()))
			named := runningPod(f, "sb2", 11)
			named.Annotations = map[string]string{"nri-cni.io/networks": "storage"}
			err := p.RunPodSandbox(context.Background(), named)
			if background {
				f.Mgr.Background().WaitIdle()
				if err == nil {
					err = createContainer(t, p, named)
				}
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), `unknown network "storage"`)
			assert.Contains(t, err.Error(), f.ConfDir)
			assert.Empty(t, f.Calls())
		})
	}
}
