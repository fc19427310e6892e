package plan

import "slices"

// ReadAnnotations lists the pod annotations planning reads, so a caller that
// copies pods from the API (migrate-check) keeps exactly what Plan looks at
// and nothing else (a pod's other annotations can be large).
func ReadAnnotations() []string { return slices.Clone(readAnnotations) }
