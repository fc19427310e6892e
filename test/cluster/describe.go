package cluster

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// DescribePod is what a failing test prints about a pod that did not get
// where it should: its node, phase, conditions (reasons, messages), the
// containers' states and the pod's events, oldest first. It never fails:
// what it cannot read it says so.
func (c *Cluster) DescribePod(ctx context.Context, namespace, name string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "pod %s/%s:", namespace, name)
	p, err := c.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		fmt.Fprintf(&b, " %v\n", err)
	} else {
		fmt.Fprintf(&b, " node %q, phase %s", p.Spec.NodeName, p.Status.Phase)
		if p.Status.Reason != "" || p.Status.Message != "" {
			fmt.Fprintf(&b, " (%s: %s)", p.Status.Reason, p.Status.Message)
		}
		b.WriteString("\n")
		for _, cond := range p.Status.Conditions {
			fmt.Fprintf(&b, "  condition %s=%s %s %s\n", cond.Type, cond.Status, cond.Reason, cond.Message)
		}
		for _, cs := range slices.Concat(p.Status.InitContainerStatuses, p.Status.ContainerStatuses) {
			fmt.Fprintf(&b, "  container %s: %s\n", cs.Name, containerState(cs.State))
		}
	}
	evs, err := c.Client.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", name).String(),
	})
	if err != nil {
		fmt.Fprintf(&b, "  events: %v\n", err)
		return b.String()
	}
	slices.SortFunc(evs.Items, func(a, b corev1.Event) int { return eventTime(a).Compare(eventTime(b)) })
	for _, e := range evs.Items {
		from := cmp.Or(e.Source.Component, e.ReportingController)
		fmt.Fprintf(&b, "  event %s %s %s (x%d, %s): %s\n", eventTime(e).Format("15:04:05"), e.Type, e.Reason, max(e.Count, 1), from, e.Message)
	}
	return b.String()
}

// eventTime is when an event last happened: LastTimestamp, or EventTime for
// those written through events.k8s.io (the scheduler's).
func eventTime(e corev1.Event) time.Time {
	if !e.LastTimestamp.IsZero() {
		return e.LastTimestamp.Time
	}
	return e.EventTime.Time
}

func containerState(s corev1.ContainerState) string {
	switch {
	case s.Running != nil:
		return "running since " + s.Running.StartedAt.Format("15:04:05")
	case s.Waiting != nil:
		return fmt.Sprintf("waiting (%s: %s)", s.Waiting.Reason, s.Waiting.Message)
	case s.Terminated != nil:
		return fmt.Sprintf("terminated (exit %d, %s: %s)", s.Terminated.ExitCode, s.Terminated.Reason, s.Terminated.Message)
	}
	return "no state"
}
