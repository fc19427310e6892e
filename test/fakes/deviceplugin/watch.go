package deviceplugin

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

func insecureCreds() credentials.TransportCredentials { return insecure.NewCredentials() }

// watchKubelet registers again whenever kubelet.sock is created in Dir: a
// starting kubelet removes every socket there (ours too) and forgets its
// plugins, as real device plugins expect (they watch the same file).
func (p *Plugin) watchKubelet() error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("device plugin %s: %w", p.cfg.ResourceName, err)
	}
	if err := w.Add(p.cfg.Dir); err != nil {
		_ = w.Close()
		return fmt.Errorf("device plugin %s: watching %s: %w", p.cfg.ResourceName, p.cfg.Dir, err)
	}
	kubelet := filepath.Base(pluginapi.KubeletSocket)
	p.watchWG.Add(1)
	go func() {
		defer p.watchWG.Done()
		defer w.Close()
		for {
			select {
			case <-p.stopped:
				return
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				if filepath.Base(ev.Name) != kubelet || !ev.Has(fsnotify.Create) {
					continue
				}
				err := p.serve()
				if err == nil {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					err = p.registerRetrying(ctx)
					cancel()
				}
				p.mu.Lock()
				p.lastErr = err
				p.mu.Unlock()
			case <-w.Errors:
			}
		}
	}()
	return nil
}

// registerRetrying registers, retrying while the new kubelet's socket is not
// answering yet.
func (p *Plugin) registerRetrying(ctx context.Context) error {
	for {
		err := p.Register(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-p.stopped:
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}
