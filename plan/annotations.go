package plan

import "slices"

// ReadAnnotations lists the pod annotations planning reads, so a caller that
// copies pods from the API (migrate-check) keeps exactly what Plan looks at
// and nothing else (a pod's other annotations can be large). Multus's
// default-network annotation is among them: planning only looks whether it
// is there (no size limit: it is never parsed).
func ReadAnnotations() []string {
	return append(slices.Clone(readAnnotations), AnnotationMultusDefaultNetwork)
}
