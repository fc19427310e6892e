// Command fake-device-plugin runs test/fakes/deviceplugin until SIGINT or
// SIGTERM, then removes its interfaces, files and socket. As root, beside a
// running kubelet:
//
//	fake-device-plugin -resource vendor.example/res -count 4
//
// It prints the device IDs (= interface names in the host namespace), one a line.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/nri-cni/nri-cni/test/fakes/deviceplugin"
)

func main() {
	var cfg deviceplugin.Config
	var links string
	flag.StringVar(&cfg.ResourceName, "resource", "vendor.example/res", "extended resource name")
	flag.IntVar(&cfg.Count, "count", 4, "devices to advertise (1-256)")
	flag.StringVar(&cfg.Dir, "dir", "", "the kubelet's device-plugin dir (default /var/lib/kubelet/device-plugins)")
	flag.StringVar(&links, "links", "veth", "veth, dummy or none")
	flag.StringVar(&cfg.NetNS, "netns", "", "network namespace path for the interfaces (default: this process's)")
	flag.StringVar(&cfg.IDPrefix, "prefix", "", "device ID prefix (default fdp)")
	flag.StringVar(&cfg.DevInfoDir, "devinfo-dir", "", "Device Information root (default "+deviceplugin.DefaultDevInfoDir+")")
	flag.Parse()
	cfg.Links = deviceplugin.LinkKind(links)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	p, err := deviceplugin.Start(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake-device-plugin:", err)
		os.Exit(1)
	}
	for _, id := range p.DeviceIDs() {
		fmt.Println(id)
	}
	<-ctx.Done()
	if err := p.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "fake-device-plugin:", err)
		os.Exit(1)
	}
}
