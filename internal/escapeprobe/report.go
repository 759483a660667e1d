package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Status is the outcome of one check or of one attempt inside a check.
type Status string

// The statuses. BLOCKED, ESCAPED and ERROR are the ones every check can
// report; OK and DENIED only come from checks of what must work
// (write-allowed); SKIPPED marks a check of "all" whose parameter was not
// given.
const (
	Blocked Status = "BLOCKED"
	Escaped Status = "ESCAPED"
	Errored Status = "ERROR"
	OK      Status = "OK"
	Denied  Status = "DENIED"
	Skipped Status = "SKIPPED"
)

// Exit statuses of the probe.
const (
	exitClean   = 0 // every check BLOCKED, OK or SKIPPED
	exitEscaped = 1 // some check ESCAPED
	exitError   = 2 // some check ERROR (or bad usage), none ESCAPED
	exitDenied  = 3 // some allowed operation was DENIED, nothing ESCAPED or ERROR
)

// attempt is one try inside a check, e.g. the bind mount of "mount".
type attempt struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	Detail string `json:"detail"`
}

// result is one check's outcome: the worst of its attempts.
type result struct {
	Check    string    `json:"check"`
	Status   Status    `json:"status"`
	Detail   string    `json:"detail"`
	Attempts []attempt `json:"attempts,omitempty"`
}

// summarize sets the check's status from its attempts: ESCAPED if any
// escaped, else ERROR if any failed to run, else DENIED if an allowed
// operation was refused, else OK for checks of allowed operations, else
// BLOCKED. The detail lists every attempt as name=detail.
func summarize(check string, atts []attempt) result {
	r := result{Check: check, Attempts: atts}
	var escaped, errored, denied, ok bool
	parts := make([]string, 0, len(atts))
	for _, a := range atts {
		switch a.Status {
		case Escaped:
			escaped = true
		case Errored:
			errored = true
		case Denied:
			denied = true
		case OK:
			ok = true
		}
		parts = append(parts, a.Name+"="+token(a.Detail))
	}
	switch {
	case escaped:
		r.Status = Escaped
	case errored:
		r.Status = Errored
	case denied:
		r.Status = Denied
	case ok:
		r.Status = OK
	default:
		r.Status = Blocked
	}
	r.Detail = strings.Join(parts, " ")
	return r
}

// token makes s one whitespace-free word, so that a line splits on spaces
// into check, status and name=detail pairs.
func token(s string) string {
	if s == "" {
		return "-"
	}
	return strings.Join(strings.Fields(s), "_")
}

// exitCode is the probe's exit status for results.
func exitCode(rs []result) int {
	code := exitClean
	for _, r := range rs {
		switch r.Status {
		case Escaped:
			return exitEscaped
		case Errored:
			code = exitError
		case Denied:
			if code == exitClean {
				code = exitDenied
			}
		}
	}
	return code
}

// writeText prints one line per check: CHECK STATUS DETAIL.
func writeText(w io.Writer, rs []result) error {
	for _, r := range rs {
		if _, err := fmt.Fprintf(w, "%s %s %s\n", r.Check, r.Status, r.Detail); err != nil {
			return err
		}
	}
	return nil
}

// report is the -json document.
type report struct {
	Results []result `json:"results"`
	Exit    int      `json:"exit"`
}

// writeJSON prints the results as one JSON document.
func writeJSON(w io.Writer, rs []result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(report{Results: rs, Exit: exitCode(rs)})
}
