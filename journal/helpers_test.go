package journal_test

import "fmt"

func fmtAny(v any) string { return fmt.Sprint(v) }
