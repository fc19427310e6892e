package attach

import "sync"

// liveSandboxes are the pod sandboxes the runtime runs, by pod UID (the
// latest sandbox of each pod).
type liveSandboxes struct {
	mu    sync.Mutex // guards byUID
	byUID map[string]Sandbox
}

func (l *liveSandboxes) set(sb Sandbox) {
	if sb.Kind != "pod" || sb.Pod.UID == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byUID == nil {
		l.byUID = map[string]Sandbox{}
	}
	l.byUID[sb.Pod.UID] = sb
}

func (l *liveSandboxes) drop(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for uid, sb := range l.byUID {
		if sb.ID == id {
			delete(l.byUID, uid)
		}
	}
}

func (l *liveSandboxes) get(uid string) (Sandbox, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	sb, ok := l.byUID[uid]
	return sb, ok
}

// replace keeps exactly the listed sandboxes (Synchronize).
func (l *liveSandboxes) replace(list []Sandbox) {
	l.mu.Lock()
	l.byUID = map[string]Sandbox{}
	l.mu.Unlock()
	for _, sb := range list {
		l.set(sb)
	}
}
