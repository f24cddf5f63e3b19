package main

// The ops of the feature diag, on the client's BlockingForest and LockHolders.

import "context"

func (a *adapter) opLockHolders(r request) (map[string]interface{}, error) {
	name, err := r.str("name", true)
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	c, err := a.client(ctx)
	if err != nil {
		return nil, err
	}
	hs, err := c.LockHolders(ctx, name)
	if err != nil {
		return nil, err
	}
	out := make([]map[string]interface{}, 0, len(hs))
	for _, h := range hs {
		out = append(out, map[string]interface{}{"pid": h.PID, "mode": h.Mode, "granted": h.Granted,
			"is_self": h.IsSelf})
	}
	return map[string]interface{}{"holders": out}, nil
}

func (a *adapter) opBlockingForest(r request) (map[string]interface{}, error) {
	pid, err := r.integer("pid", nil)
	if err != nil {
		return nil, err
	}
	if pid < 0 || pid > 1<<31-1 {
		return nil, fail("usage", "pid must be a process id")
	}
	ctx := context.Background()
	c, err := a.client(ctx)
	if err != nil {
		return nil, err
	}
	f, err := c.BlockingForest(ctx)
	if err != nil {
		return nil, err
	}
	s, ok := f.Session(int(pid))
	if !ok {
		return map[string]interface{}{"found": false}, nil
	}
	var depth interface{}
	if s.Depth >= 0 {
		depth = s.Depth
	}
	return map[string]interface{}{"found": true, "blocked_by": pids(s.BlockedBy), "blocks": pids(s.Blocks),
		"root": s.Root, "depth": depth, "in_cycle": s.InCycle, "blocks_total": s.BlocksTotal}, nil
}

// pids is a list for JSON: [] rather than null when empty.
func pids(p []int) []int {
	if p == nil {
		return []int{}
	}
	return p
}
