package oci

import (
	"os"
	"testing"

	"github.com/nri-cni/nri-cni/attach/attachtest"
)

func TestMain(m *testing.M) { os.Exit(attachtest.Main(m)) }
