package nri

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/containerd/nri/pkg/stub"
	"github.com/containerd/ttrpc"
	"github.com/sirupsen/logrus"
)

// Backoff bounds for reconnecting to the runtime.
const (
	minBackoff = 250 * time.Millisecond
	maxBackoff = 10 * time.Second
	// stableAfter: a connection that lasted this long resets the backoff.
	stableAfter = 30 * time.Second
)

// RunExternal connects the plugin to the runtime's NRI socket and keeps it
// connected: when the runtime goes away (containerd restart) it reconnects
// with exponential backoff. It returns when ctx ends.
func RunExternal(ctx context.Context, p *Plugin, socket, name, idx string, log *logrus.Entry) error {
	backoff := minBackoff
	for {
		start := time.Now()
		opts := []stub.Option{stub.WithSocketPath(socket), stub.WithPluginName(name), stub.WithPluginIdx(idx)}
		if p.Dial != nil {
			opts = append(opts, stub.WithDialer(p.Dial))
		}
		err := runOnce(ctx, p, opts...)
		p.disconnected()
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(start) > stableAfter {
			backoff = minBackoff
		}
		l := log.WithError(err).WithField("retry_in", backoff)
		if ClosedByRuntime(err) {
			l.Info("the runtime closed the NRI connection (restart or shutdown); reconnecting")
		} else {
			l.Warn("NRI connection ended, reconnecting")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// RunPrelaunched serves the connection the runtime handed over on the fd in
// NRI_PLUGIN_SOCKET; name and index come from the environment. It returns
// when the runtime closes the connection (the runtime relaunches us).
func RunPrelaunched(ctx context.Context, p *Plugin) error {
	err := runOnce(ctx, p)
	p.disconnected()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

var errConnClosed = errors.New("connection to the runtime closed")

// ClosedByRuntime reports whether err only says the runtime closed the
// connection: what a runtime shutdown or restart looks like, not a failure.
// A connection read that ends in EOF is the runtime closing it too (seen
// when CRI-O stops: the stub's Run returns io.EOF).
func ClosedByRuntime(err error) bool {
	return errors.Is(err, errConnClosed) || errors.Is(err, ttrpc.ErrServerClosed) || errors.Is(err, ttrpc.ErrClosed) ||
		errors.Is(err, io.EOF)
}

func runOnce(ctx context.Context, p *Plugin, opts ...stub.Option) error {
	st, err := stub.New(p, append(opts, stub.WithFailurePolicy(failurePolicy()))...)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.runtimeNRI = st.RuntimeNRIVersion
	p.mu.Unlock()
	if err := st.Run(ctx); err != nil {
		return err
	}
	return errConnClosed
}
