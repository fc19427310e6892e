package nodeconf

import (
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"

	"github.com/nri-cni/nri-cni/deploy/node"
)

func TestCheckCRIO(t *testing.T) {
	const (
		conf   = "etc/crio/crio.conf"
		dropIn = "etc/crio/crio.conf.d/10-nri-cni.conf"
	)
	ours := &fstest.MapFile{Data: node.CRIODropIn()}
	validatorOff := file("[crio.nri.default_validator]\nnri_enable_default_validator = false\n")
	tests := []struct {
		name      string
		files     fstest.MapFS
		nri, vali bool
		read      []string
		problems  []string
		fix       string
	}{
		{name: "nothing: CRI-O's defaults (NRI on, validator off)", files: fstest.MapFS{},
			nri: true, problems: []string{"drop-in /etc/crio/crio.conf.d/10-nri-cni.conf is absent"}, fix: "nri-cni node-setup --runtime crio"},
		{name: "the drop-in alone", files: fstest.MapFS{dropIn: ours}, nri: true, vali: true,
			read: []string{"/etc/crio/crio.conf.d/10-nri-cni.conf"}},
		{name: "crio.conf's own NRI keys stay, the drop-in overrides enable_nri", files: fstest.MapFS{
			conf:   file("[crio.nri]\nenable_nri = false\nnri_listen = \"/run/x/nri.sock\"\n"),
			dropIn: ours}, nri: true, vali: true, read: []string{"/etc/crio/crio.conf", "/etc/crio/crio.conf.d/10-nri-cni.conf"}},
		{name: "a later drop-in turns the validator off", files: fstest.MapFS{dropIn: ours, "etc/crio/crio.conf.d/99-off.conf": validatorOff},
			nri: true, problems: []string{"/etc/crio/crio.conf.d/99-off.conf sets nri_enable_default_validator = false"},
			fix: "remove that key from /etc/crio/crio.conf.d/99-off.conf"},
		{name: "an earlier drop-in is overridden", files: fstest.MapFS{dropIn: ours, "etc/crio/crio.conf.d/00-off.conf": validatorOff},
			nri: true, vali: true, read: []string{"/etc/crio/crio.conf.d/00-off.conf", "/etc/crio/crio.conf.d/10-nri-cni.conf"}},
		{name: "subdirectories are read too, in lexical order", files: fstest.MapFS{dropIn: ours, "etc/crio/crio.conf.d/zz/off.conf": validatorOff},
			nri: true, problems: []string{"/etc/crio/crio.conf.d/zz/off.conf sets"}},
		{name: "a later drop-in turns NRI off", files: fstest.MapFS{dropIn: ours, "etc/crio/crio.conf.d/50-nonri.conf": file("[crio.nri]\nenable_nri = false\n")},
			vali: true, problems: []string{"NRI is off: /etc/crio/crio.conf.d/50-nonri.conf sets enable_nri = false in [crio.nri], after nri-cni's drop-in"}},
		{name: "crio.conf alone turns NRI off", files: fstest.MapFS{conf: file("[crio.nri]\nenable_nri = false\n")},
			problems: []string{"NRI is off: /etc/crio/crio.conf sets enable_nri = false", "10-nri-cni.conf is absent"}},
		{name: "the validator on in crio.conf, no drop-in dir", files: fstest.MapFS{conf: file(
			"[crio.nri.default_validator]\nnri_enable_default_validator = true\n")}, nri: true, vali: true},
		{name: "a drop-in that is not TOML stops crio", files: fstest.MapFS{dropIn: ours, "etc/crio/crio.conf.d/README": file("see the wiki\n")},
			problems: []string{"/etc/crio/crio.conf.d/README: not valid TOML"}, fix: "correct it"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := Check(Options{Runtime: "crio", FS: tc.files})
			assert.Equal(t, RuntimeCRIO, r.Runtime)
			assert.Equal(t, tc.nri, r.NRIEnabled, "NRI enabled")
			assert.Equal(t, tc.vali, r.ValidatorEnabled, "validator enabled")
			if tc.read != nil {
				assert.Equal(t, tc.read, r.Files)
			}
			if assert.Len(t, r.Findings, len(tc.problems), "%v", r.Findings) {
				for i, p := range tc.problems {
					assert.Contains(t, r.Findings[i].Problem, p)
				}
			}
			if tc.fix != "" && len(r.Findings) > 0 {
				assert.Contains(t, r.Findings[0].Fix, tc.fix)
			}
		})
	}
}
