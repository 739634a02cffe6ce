package responder

// assembly collects the parts of one signed message, a verdict or a duty list, until it is
// whole. It holds one message at a time: a part of a newer one drops an unfinished older
// one, which the ccm sends again whole if it still matters, and a part of an older one is
// left. Only parts that carry the ccm's signature reach it, so no one else can make it
// hold anything.
type assembly[T any] struct {
	instance, seq uint64
	parts         [][]T
	have          int
}

// add takes part of parts of message seq of instance, and returns the items of the whole
// message once the last of its parts is in.
func (g *assembly[T]) add(instance, seq uint64, part, parts int, items []T) ([]T, bool) {
	if instance == g.instance && seq < g.seq {
		return nil, false
	}
	if instance != g.instance || seq != g.seq || len(g.parts) != parts {
		*g = assembly[T]{instance: instance, seq: seq, parts: make([][]T, parts)}
	}
	if g.parts[part] == nil {
		g.have++
	}
	if items == nil {
		items = []T{} // a part seen, though empty
	}
	g.parts[part] = items
	if g.have < parts {
		return nil, false
	}
	var all []T
	for _, p := range g.parts {
		all = append(all, p...)
	}
	*g = assembly[T]{instance: instance, seq: seq}
	return all, true
}
