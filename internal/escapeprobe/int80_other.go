//go:build linux && !amd64

package main

import "errors"

func int80Call(rawCall) (uintptr, error) {
	return 0, errors.New("int $0x80 needs linux/amd64")
}
