// Package node holds the runtime configuration an nri-cni node needs, as the
// files deploy/node ships: a containerd drop-in and a CRI-O drop-in that turn
// on NRI's default validator (fail closed while nri-cni is away). They are
// embedded so that `nri-cni node-setup`, the checker (nodeconf) and the test
// harnesses all use exactly these bytes.
package node

import _ "embed"

// File names, as installed on a node and as kept in this directory.
const (
	// ContainerdDropInName is the file's name in /etc/containerd/conf.d.
	ContainerdDropInName = "10-nri-cni.toml"
	// CRIODropInName is the file's name in /etc/crio/crio.conf.d.
	CRIODropInName = "10-nri-cni.conf"
	// ContainerdDropInRepoPath is the containerd drop-in's path in the repository.
	ContainerdDropInRepoPath = "deploy/node/containerd/" + ContainerdDropInName
	// CRIODropInRepoPath is the CRI-O drop-in's path in the repository.
	CRIODropInRepoPath = "deploy/node/crio/" + CRIODropInName
)

var (
	//go:embed containerd/10-nri-cni.toml
	containerdDropIn string
	//go:embed crio/10-nri-cni.conf
	crioDropIn string
)

// ContainerdDropIn returns the containerd drop-in's content (a fresh copy).
func ContainerdDropIn() []byte { return []byte(containerdDropIn) }

// CRIODropIn returns the CRI-O drop-in's content (a fresh copy).
func CRIODropIn() []byte { return []byte(crioDropIn) }
