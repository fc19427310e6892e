package plan

// Limits on what a pod's annotations may make nri-cni do (nri.conf
// limits.*). Annotations are tenant input: anyone who may create a pod
// writes them. Every check here runs before the value is parsed, so a
// hostile pod costs a length check, not a parse, a plan or an ADD.

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nri-cni/nri-cni/config"
)

// ErrLimit: a pod's annotations ask for more than nri.conf's limits allow.
// Wrapped by *LimitError.
var ErrLimit = errors.New("over a limit of nri.conf")

// LimitError names the annotation, what it asked for and the limit's key.
type LimitError struct {
	Annotation string
	What       string // "bytes" or "networks"
	Got        int    // at least this many (counting stops past the limit)
	Max        int
	Key        string // the nri.conf key of the limit
	// Subject replaces "annotation <Annotation>" in the message when the
	// limit is not one annotation's.
	Subject string
}

func (e *LimitError) Error() string {
	subject := e.Subject
	if subject == "" {
		subject = "annotation " + e.Annotation
	}
	return fmt.Sprintf("%s: %d %s, more than %s in nri.conf allows (%d)", subject, e.Got, e.What, e.Key, e.Max)
}

// Unwrap makes errors.Is(err, ErrLimit) hold.
func (e *LimitError) Unwrap() error { return ErrLimit }

// readAnnotations are the annotations nri-cni parses, in the order checked.
var readAnnotations = []string{
	AnnotationNetworks, AnnotationNPWGNetworks, AnnotationIPs, AnnotationMAC, AnnotationPortMappings,
	AnnotationIngressBandwidth, AnnotationEgressBandwidth,
}

// checkAnnotationSizes fails on the first annotation nri-cni reads whose
// value is longer than the limit.
func checkAnnotationSizes(ann map[string]string, l config.Limits) error {
	for _, k := range readAnnotations {
		if v, ok := ann[k]; ok && len(v) > l.MaxAnnotationBytes {
			return &LimitError{Annotation: k, What: "bytes", Got: len(v), Max: l.MaxAnnotationBytes, Key: config.MaxAnnotationBytesKey}
		}
	}
	return nil
}

// checkListLength fails when the comma-separated list value has more than
// max elements, counting separators only (no split, no parse).
func checkListLength(annotation, value string, max int) error {
	if n := strings.Count(value, ",") + 1; n > max {
		return &LimitError{Annotation: annotation, What: "networks", Got: n, Max: max, Key: config.MaxNetworksPerPodKey}
	}
	return nil
}
