//go:build linux

package main

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// checkSetuid runs the -setuid copy of the probe ("euid-report") and
// compares: ESCAPED if its effective uid differs from the probe's or it
// has any permitted or effective capability. An exec that is refused is
// BLOCKED; a missing or non-setuid file is ERROR.
func checkSetuid(o *options) []attempt {
	st, err := os.Stat(o.setuid)
	if err != nil {
		return []attempt{errorAttempt("setuid", err)}
	}
	if st.Mode()&os.ModeSetuid == 0 {
		return []attempt{{"setuid", Errored, "not-a-setuid-file:" + st.Mode().String()}}
	}
	out, err := exec.Command(o.setuid, "euid-report").Output()
	if err != nil {
		var e syscall.Errno
		if errors.As(err, &e) {
			return []attempt{{"exec", Blocked, errnoName(e)}}
		}
		return []attempt{errorAttempt("exec", err)}
	}
	m := make(map[string]string)
	for _, f := range strings.Fields(string(out)) {
		if k, v, ok := strings.Cut(f, "="); ok {
			m[k] = v
		}
	}
	euid, err := strconv.Atoi(m["euid"])
	if err != nil {
		return []attempt{{"exec", Errored, "bad-report:" + token(string(out))}}
	}
	var atts []attempt
	if mine := os.Geteuid(); euid != mine {
		atts = append(atts, attempt{"euid", Escaped, itoa(mine) + "->" + itoa(euid)})
	} else {
		atts = append(atts, attempt{"euid", Blocked, "unchanged=" + itoa(euid)})
	}
	for _, k := range []string{"capeff", "capprm"} {
		v, err := strconv.ParseUint(m[k], 16, 64)
		switch {
		case err != nil:
			atts = append(atts, attempt{k, Errored, "unparsable:" + token(m[k])})
		case v != 0:
			atts = append(atts, attempt{k, Escaped, "0x" + m[k]})
		default:
			atts = append(atts, attempt{k, Blocked, "0"})
		}
	}
	return atts
}
