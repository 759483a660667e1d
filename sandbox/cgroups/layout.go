package cgroups

import (
	"bufio"
	"bytes"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
)

// hierarchy is one mounted cgroup hierarchy and this process's cgroup in it.
type hierarchy struct {
	// v2 marks the unified (cgroup2) hierarchy.
	v2 bool
	// controllers are the v1 controllers bound to the hierarchy ("cpu",
	// "cpuacct", "name=systemd"...); empty for v2, whose controllers are
	// read from cgroup.controllers when needed.
	controllers []string
	// mount is where the hierarchy is mounted.
	mount string
	// dir is the directory of this process's own cgroup in it: new groups
	// are created beneath it.
	dir string
}

// layout is what this process sees of the cgroup hierarchies.
type layout struct {
	// v2 is the cgroup2 hierarchy, nil when none is mounted.
	v2 *hierarchy
	// v1 maps a v1 controller name to its hierarchy.
	v1 map[string]*hierarchy
}

// mountEntry is one cgroup or cgroup2 line of /proc/self/mountinfo.
type mountEntry struct {
	root, mountPoint, fstype string
	superOpts                []string
}

// parseLayout matches the process's cgroups (/proc/self/cgroup) with the
// mounted hierarchies (/proc/self/mountinfo). A hierarchy this process's
// cgroup is not visible in (mounted from another subtree) is left out.
func parseLayout(mountinfo, procCgroup []byte) (*layout, error) {
	mounts, err := parseMountinfo(mountinfo)
	if err != nil {
		return nil, err
	}
	l := &layout{v1: map[string]*hierarchy{}}
	sc := bufio.NewScanner(bytes.NewReader(procCgroup))
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		// hierarchy-ID:controller-list:cgroup-path; the path may contain ':'.
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			return nil, fmt.Errorf("cgroups: malformed /proc/self/cgroup line %q", line)
		}
		id, ctrls, cgPath := parts[0], parts[1], parts[2]
		if id == "0" && ctrls == "" {
			for _, m := range mounts {
				if m.fstype != "cgroup2" {
					continue
				}
				if dir, ok := cgroupDir(m, cgPath); ok {
					l.v2 = &hierarchy{v2: true, mount: m.mountPoint, dir: dir}
					break
				}
			}
			continue
		}
		want := strings.Split(ctrls, ",")
		for _, m := range mounts {
			if m.fstype != "cgroup" || !containsAll(m.superOpts, want) {
				continue
			}
			dir, ok := cgroupDir(m, cgPath)
			if !ok {
				continue
			}
			h := &hierarchy{controllers: want, mount: m.mountPoint, dir: dir}
			for _, c := range want {
				if _, dup := l.v1[c]; !dup {
					l.v1[c] = h
				}
			}
			break
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("cgroups: read /proc/self/cgroup: %w", err)
	}
	return l, nil
}

// cgroupDir is the directory of cgroup cgPath under mount m, if the mount
// shows it.
func cgroupDir(m mountEntry, cgPath string) (string, bool) {
	cgPath = path.Clean("/" + cgPath)
	if m.root == "/" {
		return path.Join(m.mountPoint, cgPath), true
	}
	if cgPath == m.root {
		return m.mountPoint, true
	}
	if rel, ok := strings.CutPrefix(cgPath, m.root+"/"); ok {
		return path.Join(m.mountPoint, rel), true
	}
	return "", false
}

// parseMountinfo returns the cgroup and cgroup2 mounts, in order.
func parseMountinfo(data []byte) ([]mountEntry, error) {
	var out []mountEntry
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		// ID parent major:minor root mountpoint opts [optional...] - fstype source superopts
		left, right, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		lf, rf := strings.Fields(left), strings.Fields(right)
		if len(lf) < 5 || len(rf) < 3 {
			continue
		}
		if rf[0] != "cgroup" && rf[0] != "cgroup2" {
			continue
		}
		out = append(out, mountEntry{
			root:       unescapeMountinfo(lf[3]),
			mountPoint: unescapeMountinfo(lf[4]),
			fstype:     rf[0],
			superOpts:  strings.Split(rf[2], ","),
		})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("cgroups: read /proc/self/mountinfo: %w", err)
	}
	return out, nil
}

// unescapeMountinfo undoes the kernel's octal escapes (\040 for a space...).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func containsAll(set, want []string) bool {
	for _, w := range want {
		if !slices.Contains(set, w) {
			return false
		}
	}
	return true
}
