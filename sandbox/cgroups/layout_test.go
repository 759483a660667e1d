package cgroups

import (
	"testing"
)

// mountinfo lines (ID parent dev root mountpoint opts - fstype source superopts)
// and /proc/self/cgroup texts of the layouts cairn meets.
const (
	mixedMountinfo = `22 1 8:1 / / rw,relatime - ext4 /dev/vda rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`
	mixedCgroup = `9:name=systemd:/
8:pids:/
4:memory:/process_api/8716c61e
2:cpuacct:/
1:cpu:/
0::/
`
)

func TestParseLayout(t *testing.T) {
	type want struct {
		v2        string // dir of the v2 hierarchy, "" for none
		v1        map[string]string
		v1Missing []string
	}
	for _, tc := range []struct {
		name                 string
		mountinfo, procGroup string
		want                 want
	}{
		{
			name:      "Mixed",
			mountinfo: mixedMountinfo,
			procGroup: mixedCgroup,
			want: want{
				v2: "/sys/fs/cgroup/unified",
				v1: map[string]string{
					"memory":       "/sys/fs/cgroup/memory/process_api/8716c61e",
					"pids":         "/sys/fs/cgroup/pids",
					"cpu":          "/sys/fs/cgroup/cpu",
					"cpuacct":      "/sys/fs/cgroup/cpuacct",
					"name=systemd": "/sys/fs/cgroup/systemd",
				},
			},
		},
		{
			name:      "V2Only",
			mountinfo: "30 25 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n",
			procGroup: "0::/user.slice/user-1000.slice/session-2.scope\n",
			want: want{
				v2:        "/sys/fs/cgroup/user.slice/user-1000.slice/session-2.scope",
				v1Missing: []string{"memory", "pids", "cpu"},
			},
		},
		{
			// A container without a cgroup namespace: the hierarchy is
			// mounted from the container's own subtree.
			name: "V1SubtreeMount",
			mountinfo: "50 40 0:32 /docker/abc /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory\n" +
				"51 40 0:29 /docker/abc /sys/fs/cgroup/cpu,cpuacct ro,nosuid - cgroup cgroup rw,cpu,cpuacct\n" +
				"52 40 0:36 /other /sys/fs/cgroup/pids ro,nosuid - cgroup cgroup rw,pids\n",
			procGroup: "5:memory:/docker/abc/sub\n4:cpu,cpuacct:/docker/abc\n3:pids:/docker/abc\n",
			want: want{
				v1: map[string]string{
					"memory":  "/sys/fs/cgroup/memory/sub",
					"cpu":     "/sys/fs/cgroup/cpu,cpuacct",
					"cpuacct": "/sys/fs/cgroup/cpu,cpuacct",
				},
				// Mounted from a subtree that does not hold our cgroup.
				v1Missing: []string{"pids"},
			},
		},
		{
			name:      "EscapedMountPoint",
			mountinfo: `41 31 0:38 / /mnt/cgroup\040two rw - cgroup2 cgroup2 rw` + "\n",
			procGroup: "0::/a:b\n",
			want:      want{v2: "/mnt/cgroup two/a:b"},
		},
		{
			name:      "NoCgroupMounts",
			mountinfo: "22 1 8:1 / / rw - ext4 /dev/vda rw\n",
			procGroup: "0::/\n",
			want:      want{v1Missing: []string{"memory"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := parseLayout([]byte(tc.mountinfo), []byte(tc.procGroup))
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.want.v2 == "" && l.v2 != nil:
				t.Errorf("v2 = %+v, want none", *l.v2)
			case tc.want.v2 != "" && l.v2 == nil:
				t.Errorf("v2 missing, want %s", tc.want.v2)
			case tc.want.v2 != "" && l.v2.dir != tc.want.v2:
				t.Errorf("v2 dir = %s, want %s", l.v2.dir, tc.want.v2)
			}
			for c, dir := range tc.want.v1 {
				if h := l.v1[c]; h == nil || h.dir != dir {
					t.Errorf("v1 %s = %+v, want dir %s", c, h, dir)
				}
			}
			for _, c := range tc.want.v1Missing {
				if h := l.v1[c]; h != nil {
					t.Errorf("v1 %s = %+v, want none", c, *h)
				}
			}
		})
	}
}

func TestParseLayout_Malformed(t *testing.T) {
	if _, err := parseLayout([]byte(mixedMountinfo), []byte("garbage\n")); err == nil {
		t.Fatal("parseLayout accepted a malformed /proc/self/cgroup")
	}
}
