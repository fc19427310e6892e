package cni

import (
	"errors"
	"io/fs"
	"strings"
)

// IsAlreadyGone reports whether a teardown error only says that what DEL
// would remove is gone already (the netns, a veth, an IPAM file).
//
// This is the one place nri-cni matches an error string: CNI plugins run as
// separate processes and report failures as text, and the CNI contract
// (DEL must tolerate missing resources) leaves "no such file or directory"
// as the only portable signal. Keep it here, nowhere else.
func IsAlreadyGone(err error) bool {
	if err == nil {
		return false
	}
	return errors.Is(err, fs.ErrNotExist) || strings.Contains(err.Error(), "no such file or directory")
}
