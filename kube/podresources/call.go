package podresources

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Backoff between attempts after ResourceExhausted or Unavailable: the
// kubelet's bucket refills a token every 10 ms.
const (
	firstBackoff = 10 * time.Millisecond
	maxBackoff   = 250 * time.Millisecond
)

// errGetUnsupported: the kubelet does not serve Get; lookups use List.
var errGetUnsupported = errors.New("the kubelet does not serve PodResources Get")

// startLocked starts a call (c.mu held). Its context is not any lookup's: it
// ends when every waiter left (wait), at CallTimeout, or on success.
func (c *Client) startLocked(list bool, key string, now time.Time) *flight {
	ctx, cancel := context.WithTimeout(context.Background(), c.o.CallTimeout)
	f := &flight{list: list, key: key, started: now, done: make(chan struct{}), cancel: cancel, waiters: 1}
	go c.run(ctx, f)
	return f
}

func (c *Client) run(ctx context.Context, f *flight) {
	pods, err := c.call(ctx, f)
	f.cancel()
	c.mu.Lock()
	f.pods, f.err, f.finished = pods, err, true
	if f.list {
		if err != nil && c.list == f {
			c.list = nil // a failed List serves no later lookup
		}
	} else {
		if c.gets[f.key] == f {
			delete(c.gets, f.key)
		}
		if errors.Is(err, errGetUnsupported) {
			c.getOffUntil = c.now().Add(c.o.GetReprobe)
			c.stats.GetFallbacks++
		}
	}
	c.mu.Unlock()
	close(f.done)
}

// call makes f's RPC, waiting for this client's rate limiter before each
// attempt and retrying ResourceExhausted (the kubelet's rate limit) and
// Unavailable (the kubelet restarting) with a jittered exponential backoff
// until ctx ends.
func (c *Client) call(ctx context.Context, f *flight) (map[string][]*PodResources, error) {
	backoff := firstBackoff
	for attempt := 0; ; attempt++ {
		if err := c.limiter.Wait(ctx); err != nil {
			return nil, c.giveUp(f, err)
		}
		c.count(func(s *Stats) {
			if f.list {
				s.Lists++
			} else {
				s.Gets++
			}
			if attempt > 0 {
				s.Retries++
			}
		})
		pods, err := c.once(ctx, f)
		if err == nil || !retryable(err) {
			return pods, err
		}
		c.mu.Lock()
		f.lastErr = err
		if isRateLimited(err) {
			c.stats.RateLimited++
		}
		c.mu.Unlock()
		sleep := backoff/2 + rand.N(backoff/2+1)
		backoff = min(2*backoff, maxBackoff)
		t := time.NewTimer(sleep)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, c.giveUp(f, ctx.Err())
		case <-t.C:
		}
	}
}

// giveUp is the error of a call whose context or limiter ended it: with the
// kubelet's last answer, if there was one.
func (c *Client) giveUp(f *flight, err error) error {
	c.mu.Lock()
	last := f.lastErr
	c.mu.Unlock()
	if last != nil {
		return fmt.Errorf("%s on %s: %w (the kubelet's last answer: %v)", f.method(), c.o.Socket, err, last)
	}
	return fmt.Errorf("%s on %s: %w", f.method(), c.o.Socket, err)
}

func (f *flight) method() string {
	if f.list {
		return "PodResources List"
	}
	return "PodResources Get " + f.key
}

// once makes one attempt of f's RPC and indexes the answer by namespace/name.
func (c *Client) once(ctx context.Context, f *flight) (map[string][]*PodResources, error) {
	if f.list {
		resp, err := c.api.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
		if err != nil {
			return nil, c.rpcError(f, err)
		}
		pods := make(map[string][]*PodResources, len(resp.GetPodResources()))
		for _, p := range resp.GetPodResources() {
			k := podKey(p.GetNamespace(), p.GetName())
			pods[k] = append(pods[k], fromAPI(p))
		}
		return pods, nil
	}
	ns, name, _ := strings.Cut(f.key, "/")
	resp, err := c.api.Get(ctx, &podresourcesv1.GetPodResourcesRequest{PodNamespace: ns, PodName: name})
	switch {
	case err == nil && resp.GetPodResources() != nil:
		return map[string][]*PodResources{f.key: {fromAPI(resp.GetPodResources())}}, nil
	case err == nil, isNotFound(err):
		return map[string][]*PodResources{}, nil
	case isGetUnsupported(err):
		return nil, fmt.Errorf("%w: %v", errGetUnsupported, err)
	}
	return nil, c.rpcError(f, err)
}

func (c *Client) rpcError(f *flight, err error) error {
	if isTooLarge(err) {
		return fmt.Errorf("%s on %s: %w (the answer exceeds %d bytes, Options.MaxMessageSize)", f.method(), c.o.Socket, err, c.o.MaxMessageSize)
	}
	return fmt.Errorf("%s on %s: %w", f.method(), c.o.Socket, err)
}

// The kubelet's errors. Only the gRPC code is typed; where the kubelet gives
// no code (its plain fmt.Errorf errors arrive as codes.Unknown) the message
// is the contract, matched here and nowhere else:
//   - Get for a pod it does not know (or whose pod is terminated):
//     "pod <name> in namespace <ns> not found" (server_v1.go, 1.27–1.37);
//   - Get behind its feature gate (KubeletPodResourcesGet, default off before
//     1.34): "PodResources API Get method disabled"; kubelets before 1.27
//     answer Unimplemented;
//   - gRPC's own size check, which also uses ResourceExhausted:
//     "grpc: received message larger than max (… vs. …)".

func isNotFound(err error) bool {
	s, ok := status.FromError(err)
	return ok && s.Code() == codes.Unknown && strings.HasSuffix(s.Message(), " not found")
}

func isGetUnsupported(err error) bool {
	s, ok := status.FromError(err)
	return ok && (s.Code() == codes.Unimplemented ||
		(s.Code() == codes.Unknown && strings.Contains(s.Message(), "Get method disabled")))
}

func isTooLarge(err error) bool {
	s, ok := status.FromError(err)
	return ok && s.Code() == codes.ResourceExhausted && strings.Contains(s.Message(), "larger than max")
}

func isRateLimited(err error) bool {
	return status.Code(err) == codes.ResourceExhausted && !isTooLarge(err)
}

func retryable(err error) bool {
	return isRateLimited(err) || status.Code(err) == codes.Unavailable
}
