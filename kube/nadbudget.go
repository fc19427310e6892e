package kube

// The NAD cache's budget: every node caches every NAD of the cluster, so
// what the cache holds in total is bounded too (kubernetes.maxNADCacheBytes,
// counted by NADCost), not only each NAD. Past the budget the NADs share it
// fairly among their namespaces, max-min as the DRA driver shares its device
// budget (kube/dra/inventory.go): the namespaces holding the least keep all
// their NADs, and the rest get an equal share each; within a namespace over
// its share the NADs are kept in name order while they fit. So the
// namespace holding the most bytes loses first, one namespace's NADs never
// make another's that holds no more than an equal share stop working, and
// every node, seeing the same NADs, drops the same ones. The informer's
// events only keep the books; a settler applies the share, at most every
// settleEvery (10k NADs over the budget: ~12 ms, BenchmarkNADBudgetSettle),
// so a burst of events costs a few settlings, not one per NAD.
//
// A dropped NAD's content is let go (the cache keeps its identity and size:
// its name and size, ~0.6 KiB) and the pods naming it fail, saying why
// (ErrNADCacheFull). When the budget has room again (a NAD deleted or made
// smaller, a namespace's share grown) the NAD is admitted again and its
// content read back from the API server, one GET from the watch cache each
// (NADSource's refetch); until then its pods fail as while the cache syncs
// (plan.ErrSourceNotSynced), and are retried.

import (
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/nri-cni/nri-cni/cni"
)

// ErrNADCacheFull: the NAD exists, but the node's NAD cache has dropped its
// content for kubernetes.maxNADCacheBytes. The error names the NAD, the
// key, its namespace's bytes and share.
var ErrNADCacheFull = errors.New("not held in this node's NetworkAttachmentDefinition cache")

// cellState is what the cache holds of one NAD version's content.
type cellState int

const (
	cellHeld       cellState = iota // content held (admitted, or not judged yet)
	cellDropped                     // content let go: over the budget
	cellRefetching                  // admitted again, its content being read back
)

// nadCell is one NAD version as the cache holds it. The identity and size
// never change; the rest is guarded by the budget's mutex.
type nadCell struct {
	namespace, name, resourceVersion string
	size                             int

	content *nadContent // nil unless cellHeld
	state   cellState
	over    *nsShare   // cellDropped: its namespace's share (shared by its cells)
	parsed  *parsedNAD // the verdict of content, once asked (dropped with it)
}

func (c *nadCell) key() string { return c.namespace + "/" + c.name }

// parsedNAD memoises a NAD version's verdict: its Network, or why it is
// refused (size, policy, parse).
type parsedNAD struct {
	net *cni.Network
	err error
}

// nadBudget holds the cells of the NADs the informer has, and decides which
// keep their content. put and remove only keep the books; settle (the
// source's settler, coalescing bursts) applies the fair share.
type nadBudget struct {
	max  int
	kick chan struct{} // settle is due (buffered: one pending wake-up)

	mu    sync.Mutex          // guards the rest, and every cell's mutable fields
	cells map[string]*nadCell // namespace/name -> the newest version seen
	total int                 // the sizes of cells
	out   map[string]*nadCell // the cells not held (dropped or refetching)
}

func newNADBudget(max int) *nadBudget {
	return &nadBudget{max: max, kick: make(chan struct{}, 1), cells: map[string]*nadCell{}, out: map[string]*nadCell{}}
}

// budgetChange is what one settling did: the cells it dropped now, the keys
// to read back, and how many are dropped after it.
type budgetChange struct {
	dropped []*nadCell
	refetch []string
	out     int
}

// put makes c its NAD's version (an add or update the informer delivered).
func (b *nadBudget) put(c *nadCell) {
	b.mu.Lock()
	defer b.mu.Unlock()
	key := c.key()
	old := b.cells[key]
	if old == c {
		return // a resync: nothing changed
	}
	if old != nil {
		b.total -= old.size
		delete(b.out, key)
	}
	b.cells[key] = c
	b.total += c.size
	if c.state != cellHeld {
		b.out[key] = c
	}
	b.due()
}

// remove forgets the NAD namespace/name (a delete: the informer delivers
// a NAD's events in order, the delete after its last version): its bytes
// may let others back.
func (b *nadBudget) remove(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.cells[key]
	if c == nil {
		return
	}
	delete(b.cells, key)
	delete(b.out, key)
	b.total -= c.size
	b.due()
}

// due wakes the settler when settling could change something: over the
// budget, or with NADs to bring back (b.mu held).
func (b *nadBudget) due() {
	if b.total <= b.max && len(b.out) == 0 {
		return
	}
	select {
	case b.kick <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// refetching is the resourceVersion whose content key waits for; ok false
// when it waits for none (held, dropped again, replaced or gone).
func (b *nadBudget) refetching(key string) (version string, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.cells[key]
	if c == nil || c.state != cellRefetching {
		return "", false
	}
	return c.resourceVersion, true
}

// fill gives back the content of key's version, read again; false when
// that version no longer waits for it.
func (b *nadBudget) fill(key, version string, content *nadContent) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.cells[key]
	if c == nil || c.state != cellRefetching || c.resourceVersion != version {
		return false
	}
	c.content, c.state = content, cellHeld
	delete(b.out, key)
	return true
}

// dropped is how many NADs are not held now.
func (b *nadBudget) dropped() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.out)
}

// settle applies the fair share to every cell: a cell over it lets its
// content go, a dropped one within it is to be read back. It costs a sort
// of the NADs when they are over the budget; the settler runs it at most
// every settleEvery.
func (b *nadBudget) settle() budgetChange {
	b.mu.Lock()
	defer b.mu.Unlock()
	var ch budgetChange
	if b.total <= b.max {
		for key, c := range b.out {
			if c.state == cellDropped {
				c.state, c.over = cellRefetching, nil
				ch.refetch = append(ch.refetch, key)
			}
		}
		sort.Strings(ch.refetch)
		ch.out = len(b.out)
		return ch
	}
	cells := make([]*nadCell, 0, len(b.cells))
	demands := make([]nadDemand, 0, len(b.cells))
	for _, c := range b.cells {
		cells = append(cells, c)
		demands = append(demands, nadDemand{namespace: c.namespace, name: c.name, size: c.size})
	}
	admit, shares := fairShare(demands, b.max)
	for i, c := range cells {
		switch {
		case admit[i] && c.state == cellDropped:
			c.state, c.over = cellRefetching, nil
			ch.refetch = append(ch.refetch, c.key())
		case admit[i]:
		default:
			c.over = shares[c.namespace]
			if c.state == cellHeld {
				ch.dropped = append(ch.dropped, c)
			}
			c.content, c.parsed, c.state = nil, nil, cellDropped
			b.out[c.key()] = c
		}
	}
	sort.Strings(ch.refetch)
	sort.Slice(ch.dropped, func(i, j int) bool { return ch.dropped[i].key() < ch.dropped[j].key() })
	ch.out = len(b.out)
	return ch
}

// nadDemand is one NAD as the fair share sees it.
type nadDemand struct {
	namespace, name string
	size            int
}

// nsShare is a namespace over its share, as its dropped NADs tell it: the
// budget, the namespace's bytes and share, and how many namespaces hold
// NADs.
type nsShare struct {
	max, bytes, share, namespaces int
}

// why is what a dropped NAD of ns fails its pods with.
func (s *nsShare) why(ns string) string {
	return fmt.Sprintf("kubernetes.maxNADCacheBytes (%d bytes) is used up, and namespace %s's NADs count %d bytes, "+
		"more than its share of %d (the budget is shared max-min among the %d namespaces with NADs)",
		s.max, ns, s.bytes, s.share, s.namespaces)
}

// fairShare decides which NADs fit in max bytes: all when their sum does;
// else max-min among namespaces (water-filling): in order of their bytes
// (ties: by name), a namespace within an equal share of what is left keeps
// every NAD, and the first that is not and all larger ones get that share
// each, their NADs kept in name order while they fit. shares describes the
// namespaces over their share.
func fairShare(nads []nadDemand, max int) (admit []bool, shares map[string]*nsShare) {
	admit = make([]bool, len(nads))
	total := 0
	byNS := map[string][]int{}
	bytes := map[string]int{}
	for i, d := range nads {
		total += d.size
		byNS[d.namespace] = append(byNS[d.namespace], i)
		bytes[d.namespace] += d.size
	}
	if total <= max {
		for i := range admit {
			admit[i] = true
		}
		return admit, nil
	}
	order := make([]string, 0, len(byNS))
	for ns := range byNS {
		order = append(order, ns)
	}
	sort.Slice(order, func(i, j int) bool {
		a, b := order[i], order[j]
		return bytes[a] < bytes[b] || bytes[a] == bytes[b] && a < b
	})
	shares = map[string]*nsShare{}
	left := max
	for i, ns := range order {
		share := left / (len(order) - i)
		if bytes[ns] <= share {
			for _, j := range byNS[ns] {
				admit[j] = true
			}
			left -= bytes[ns]
			continue
		}
		for _, over := range order[i:] {
			shares[over] = &nsShare{max: max, bytes: bytes[over], share: share, namespaces: len(order)}
			idx := byNS[over]
			sort.Slice(idx, func(a, b int) bool { return nads[idx[a]].name < nads[idx[b]].name })
			used := 0
			for _, j := range idx {
				if used+nads[j].size <= share {
					admit[j] = true
					used += nads[j].size
				}
			}
		}
		break
	}
	return admit, shares
}
