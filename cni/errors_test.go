package cni_test

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
	"testing"

	"github.com/nri-cni/nri-cni/cni"
)

func TestIsAlreadyGone(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"os.ErrNotExist", os.ErrNotExist, true},
		{"fs.ErrNotExist wrapped", fmt.Errorf("del: %w", fs.ErrNotExist), true},
		{"PathError ENOENT", &os.PathError{Op: "open", Path: "/x", Err: syscall.ENOENT}, true},
		{"wrapped twice", fmt.Errorf("a: %w", fmt.Errorf("b: %w", os.ErrNotExist)), true},
		{"plugin text", errors.New(`plugin type="bridge" failed (delete): failed to open netns "/var/run/netns/x": no such file or directory`), true},
		{"other", errors.New("permission denied"), false},
		{"ErrExist", os.ErrExist, false},
		{"similar text", errors.New("no such device"), false},
	}
	for _, tt := range tests {
		if got := cni.IsAlreadyGone(tt.err); got != tt.want {
			t.Errorf("%s: IsAlreadyGone(%v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}
