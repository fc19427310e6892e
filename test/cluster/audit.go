package cluster

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// AuditEvent is the part of an audit.k8s.io/v1 Event the tests count by.
type AuditEvent struct {
	Verb       string `json:"verb"`
	RequestURI string `json:"requestURI"`
	User       struct {
		Username string   `json:"username"`
		Groups   []string `json:"groups"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
	UserAgent string `json:"userAgent"`
	Stage     string `json:"stage"`
	// RequestReceived is when the API server received the request.
	RequestReceived time.Time `json:"requestReceivedTimestamp"`
}

// AuditEvents reads the audit log (Opts.Audit) and returns the events that
// match keep (all when keep is nil).
func (c *Cluster) AuditEvents(keep func(AuditEvent) bool) ([]AuditEvent, error) {
	if c.AuditLog == "" {
		return nil, fmt.Errorf("audit log off: start the cluster with Opts.Audit")
	}
	f, err := os.Open(c.AuditLog)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	defer f.Close()
	var out []AuditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e AuditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("audit log %s: %w", c.AuditLog, err)
		}
		if keep == nil || keep(e) {
			out = append(out, e)
		}
	}
	return out, sc.Err()
}
