package agent

import (
	"bytes"
	"os"
	"strconv"
)

// maxAncestors bounds the walk up the process tree in SessionOf.
const maxAncestors = 32

// SessionOf returns the id of the running session that pid belongs to, or
// "". Sessions run in their own process group, whose id is the session
// leader's pid, so pid's group (or that of the nearest ancestor whose group
// is a session's, for processes that made their own group) names it. A
// process that is already gone is attributed to the only running session,
// when there is exactly one.
func (e *Exec) SessionOf(pid int) string {
	e.mu.Lock()
	byPID := map[int]string{}
	only := ""
	for _, s := range e.sessions {
		if _, done := s.exited(); !done {
			byPID[s.pid] = s.id
			only = s.id
		}
	}
	e.mu.Unlock()
	if len(byPID) == 0 {
		return ""
	}
	for i := 0; i < maxAncestors && pid > 1; i++ {
		ppid, pgrp, ok := readStat(pid)
		if !ok {
			if i == 0 && len(byPID) == 1 {
				return only
			}
			return ""
		}
		if id, ok := byPID[pgrp]; ok {
			return id
		}
		pid = ppid
	}
	return ""
}

// readStat returns the parent pid and process group of pid from
// /proc/<pid>/stat ("pid (comm) state ppid pgrp ..."; comm may hold
// spaces and parentheses, so fields are counted after the last ')').
func readStat(pid int) (ppid, pgrp int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	return parseStat(b)
}

func parseStat(b []byte) (ppid, pgrp int, ok bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 3 {
		return 0, 0, false
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	pgrp, err2 := strconv.Atoi(string(f[2]))
	return ppid, pgrp, err1 == nil && err2 == nil
}
